// The server's paging and filtering, reproduced for the static report so that
// api/sessions and api/groups answer the same way from embedded data.

/**
 * @param {object[]} items all items, already in display order
 * @param {object} params request params: offset, limit and filter values
 * @param {Record<string, string>} filterKeys param name → item field
 * @returns {{total: number, offset: number, limit: number, items: object[]}}
 */
export function pageOf(items, params = {}, filterKeys = {}) {
  let rows = items || [];
  for (const [param, field] of Object.entries(filterKeys)) {
    const want = params[param];
    if (want === null || want === undefined || want === '') continue;
    // Query params are strings; compare as strings so policy_version=0 matches 0.
    rows = rows.filter((it) => it[field] !== null && it[field] !== undefined && String(it[field]) === String(want));
  }
  const offset = clampInt(params.offset, 0, 0);
  const limit = clampInt(params.limit, 50, 1);
  return { total: rows.length, offset, limit, items: rows.slice(offset, offset + limit) };
}

/** Sorted distinct values of each field, as the server's "facets". */
export function facetsOf(items, fields) {
  const out = {};
  for (const f of fields) {
    const vals = new Set();
    for (const it of items || []) if (it[f] !== null && it[f] !== undefined) vals.add(it[f]);
    out[f] = [...vals].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }
  return out;
}

function clampInt(v, dflt, min) {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? Math.max(min, n) : dflt;
}
