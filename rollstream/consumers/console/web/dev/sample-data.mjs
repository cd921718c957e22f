// Made-up data in the report's shape (see the console API), for looking at
// the front end without a server: dev/sample-report.mjs and dev/fake-server.mjs.

// A tiny deterministic generator so the page looks the same every run.
let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

export const T0 = 1765000000;
const harnesses = ['pi', 'claude-code'];
const sessions = [];
const groups = [];
for (let g = 0; g < 2; g++) {
  const group_id = `grp-${g}`;
  const members = [];
  for (let s = 0; s < 4; s++) {
    const k = g * 4 + s;
    const status = k === 7 ? 'running' : k === 5 ? 'failed' : 'completed';
    const reward = status === 'completed' ? (rnd() > 0.5 ? 1 : 0) : null;
    const traj = status === 'running' ? null : `traj-${k}`;
    sessions.push({
      session_id: `sess-${k}`, task_id: `task-${g}`, group_id, sample_index: s, harness: harnesses[k % 2],
      node_id: `node-${1 + (k % 2)}`, status, policy_version: g, calls: 3 + k, started_at: T0 + k * 40,
      ended_at: status === 'running' ? null : T0 + k * 40 + 30 + k, trajectory_id: traj, reward,
    });
    members.push({ trajectory_id: traj, session_id: `sess-${k}`, sample_index: s, reward, advantage: null, status });
  }
  const scored = members.filter((m) => m.reward !== null);
  const mean = scored.reduce((a, m) => a + m.reward, 0) / scored.length;
  for (const m of scored) m.advantage = m.reward - mean;
  groups.push({ group_id, task_id: `task-${g}`, mean_reward: mean, solved_rate: mean, policy_versions: [g], members });
}

// One trajectory with 300 tokens: a 120-token collapsed prefix, then two calls.
const n = Number(process.env.SAMPLE_TOKENS) || 300;
const words = ['the', ' file', ' ', '\n', 'def', ' main', '(', ')', ':', ' return', ' 42', ' tests', ' pass', '.'];
const tokens = { id: [], text: [], mask: [], logprob: [], special: [] };
for (let i = 0; i < n; i++) {
  const sampled = (i >= 130 && i < 200) || i >= 240;
  const special = i === 0 || i === 125 || i === 235;
  tokens.id.push(1000 + ((i * 37) % 5000));
  tokens.text.push(special ? '<|im_start|>' : words[i % words.length]);
  tokens.mask.push(sampled ? 1 : 0);
  tokens.logprob.push(sampled ? -Math.pow(rnd(), 3) * 4 : null);
  tokens.special.push(special);
}
const trajectory = {
  trajectory_id: 'traj-0', session_id: 'sess-0', task_id: 'task-0', group_id: 'grp-0', sample_index: 0,
  harness: 'pi', strategy: 'prefix', status: 'complete', session_status: 'completed', policy_versions: [0],
  topic: 'rollstream.scored', reward: sessions[0].reward, evaluator: 'command',
  details: { exit_code: 0, tests: '3 passed', seconds: 4.2 }, error: null,
  instruction: 'Fix the failing test in calc.py so that `pytest` passes.\nDo not change the tests.',
  segments: [{
    index: 0, parent: null, call_ids: ['c1', 'c2'], total_tokens: n, truncated: false, collapsed: [0, 120], tokens,
    call_starts: [{ at: 130, call_id: 'c1' }, { at: 240, call_id: 'c2' }],
  }],
  calls: [
    { call_id: 'c1', seq: 0, model: 'qwen3', agent: null, parent: null, status: 'ok', started_at: T0, first_token_at: T0 + 0.8, ended_at: T0 + 3.1, prompt_tokens: 130, completion_tokens: 70, error: null },
    { call_id: 'c2', seq: 1, model: 'qwen3', agent: null, parent: null, status: 'ok', started_at: T0 + 5.0, first_token_at: T0 + 5.4, ended_at: T0 + 7.9, prompt_tokens: 240, completion_tokens: 60, error: null },
    { call_id: 'c3', seq: 2, model: 'qwen3', agent: 'explorer', parent: null, status: 'ok', started_at: T0 + 3.5, first_token_at: T0 + 3.9, ended_at: T0 + 4.6, prompt_tokens: 90, completion_tokens: 40, error: null },
  ],
  threads: [
    { agent: null, parent: null, spawned_by: null, call_ids: ['c1', 'c2'] },
    { agent: 'explorer', parent: null, spawned_by: 'c1', call_ids: ['c3'] },
  ],
  diff: '--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def main():\n-    return 41\n+    return 42\n',
  final_text: 'Fixed the off-by-one in calc.py; the tests pass. </script> is escaped in the report.',
  other_topics: [],
};

const hist = { t: [], calls_per_s: [], tokens_per_s: [] };
for (let i = 0; i < 60; i++) {
  hist.t.push(T0 + i);
  hist.calls_per_s.push(1 + Math.sin(i / 6) * 0.5 + rnd() * 0.3);
  hist.tokens_per_s.push(200 + Math.cos(i / 9) * 60 + rnd() * 30);
}
const fleet = {
  now: T0 + 60, sessions: { running: 1, ended: { completed: 6, failed: 1, timeout: 0 } },
  nodes: [{ node_id: 'node-1', running: 0, ended: 4 }, { node_id: 'node-2', running: 1, ended: 3 }],
  rates: [{ harness: 'pi', model: 'qwen3', calls_per_s: 1.5, tokens_per_s: 230 }, { harness: 'claude-code', model: 'qwen3', calls_per_s: 0.4, tokens_per_s: 61.5 }],
  totals: { calls: 120, tokens: 45000, records: 400 },
  errors: [{ kind: 'upstream_timeout', count: 2 }],
  lag: [{ group: 'rollstream-reconstruct', topic: 'rollstream.events', lag: 0 }, { group: 'rollstream-score', topic: 'rollstream.trajectories', lag: 3 }],
  deadletters: 0,
  interceptors: [
    { url: 'http://127.0.0.1:9091', up: true, paused: false, spool_alarm: false, spool_bytes: 0 },
    { url: 'http://127.0.0.1:9092', up: true, paused: true, spool_alarm: true, spool_bytes: 12288 },
  ],
  policy_versions: [{ version: 1, running: 1 }],
  history: hist,
};

export const data = {
  generated: new Date(T0 * 1000 + 120000).toISOString(),
  notes: ['sample data written by dev/sample-report.mjs'],
  fleet,
  sessions,
  groups,
  rewards: {
    by_time: { t: [T0 + 60, T0 + 120, T0 + 180], mean_reward: [0.25, 0.5, 0.75], solved_rate: [0.25, 0.5, 0.67], count: [4, 4, 3] },
    by_version: [{ policy_version: 0, mean_reward: groups[0].mean_reward, solved_rate: groups[0].solved_rate, count: 4 }, { policy_version: 1, mean_reward: groups[1].mean_reward, solved_rate: groups[1].solved_rate, count: 2 }],
    staleness: [{ staleness: 0, count: 5 }, { staleness: 1, count: 1 }],
    latest_policy_version: 1,
  },
  trajectories: { 'traj-0': trajectory },
};

