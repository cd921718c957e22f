// The report's data source: answers the same API paths as the server from the
// JSON embedded in the HTML file, so every page works offline.

import { facetsOf, pageOf } from '../logic/paging.js';
import { SourceError } from './errors.js';

export const NOT_IN_REPORT = 'this trajectory is not in the report';

// Query param → item field, the same filters the server applies.
export const SESSION_FILTERS = {
  task: 'task_id',
  group: 'group_id',
  harness: 'harness',
  status: 'status',
  policy_version: 'policy_version',
};
export const GROUP_FILTERS = { task: 'task_id' };
const FACET_FIELDS = ['harness', 'status', 'policy_version'];

// Topics may be asked for by short name ("scored") or in full ("rollstream.scored").
function topicMatches(stored, wanted) {
  if (!wanted || !stored) return true;
  return stored === wanted || stored === 'rollstream.' + wanted;
}

/** @param {object} data the parsed <script id="rollstream-data"> contents */
export function createStaticSource(data) {
  const d = data || {};
  // Newest first, like the server; a stable sort keeps the report's own order for ties.
  const sessions = [...(d.sessions || [])].sort((a, b) => (b.started_at ?? 0) - (a.started_at ?? 0));
  const groups = d.groups || [];
  const trajectories = d.trajectories || {};

  async function get(path, params = {}) {
    const p = String(path).replace(/^\/+/, '');
    if (p === 'api/whoami') return { control: false };
    if (p === 'api/fleet') return d.fleet ?? null;
    if (p === 'api/sessions') {
      return { ...pageOf(sessions, { limit: 50, ...params }, SESSION_FILTERS), facets: facetsOf(sessions, FACET_FIELDS) };
    }
    if (p === 'api/groups') return pageOf(groups, { limit: 20, ...params }, GROUP_FILTERS);
    if (p === 'api/rewards') return d.rewards ?? null;
    if (p.startsWith('api/trajectories/')) {
      const id = decodeURIComponent(p.slice('api/trajectories/'.length));
      const t = Object.prototype.hasOwnProperty.call(trajectories, id) ? trajectories[id] : null;
      if (!t || !topicMatches(t.topic, params.topic)) throw new SourceError(NOT_IN_REPORT, 404);
      return t;
    }
    throw new SourceError('not available in a report: ' + p, 404);
  }

  return {
    kind: 'static',
    meta: { generated: d.generated ?? null, notes: d.notes || [] },
    get,
    async post() {
      throw new SourceError('controls are not available in a report', 400);
    },
    subscribe(onFleet, onStatus) {
      onStatus('report');
      onFleet(d.fleet ?? null);
      return () => {};
    },
    onAuthError() {
      return () => {};
    },
  };
}
