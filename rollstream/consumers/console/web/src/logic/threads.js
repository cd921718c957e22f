// Conversation threads as a tree: the main thread (agent null) at the root and
// each sub-agent under the agent that spawned it.

/**
 * @param {{agent: string|null, parent: string|null, spawned_by: string|null, call_ids: string[]}[]} threads
 * @returns {{agent: string|null, spawned_by: string|null, calls: number, children: object[]}[]} roots
 */
export function buildThreadTree(threads) {
  const nodes = (threads || []).map((t) => ({
    agent: t.agent ?? null,
    parent: t.parent ?? null,
    spawned_by: t.spawned_by ?? null,
    calls: (t.call_ids || []).length,
    children: [],
  }));
  const byAgent = new Map();
  for (const n of nodes) if (!byAgent.has(n.agent)) byAgent.set(n.agent, n);
  const roots = [];
  for (const n of nodes) {
    const parent = n.agent === null ? undefined : byAgent.get(n.parent);
    // A thread whose parent is unknown (or itself) is shown at the top level
    // rather than lost.
    if (parent && parent !== n) parent.children.push(n);
    else roots.push(n);
  }
  // Main thread first, then sub-agents by name.
  const order = (a, b) => (a.agent === null ? -1 : b.agent === null ? 1 : String(a.agent).localeCompare(String(b.agent)));
  const sortRec = (list) => {
    list.sort(order);
    for (const n of list) sortRec(n.children);
    return list;
  };
  // Guard against parent cycles: anything not reachable from a root is appended.
  const seen = new Set();
  const walk = (n) => {
    if (seen.has(n)) return;
    seen.add(n);
    n.children.forEach(walk);
  };
  roots.forEach(walk);
  for (const n of nodes) {
    if (!seen.has(n)) {
      for (const other of nodes) other.children = other.children.filter((c) => c !== n);
      roots.push(n);
      walk(n);
    }
  }
  return sortRec(roots);
}
