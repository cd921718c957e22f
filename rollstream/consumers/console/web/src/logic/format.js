// Number and time formatting. Deterministic (no locale): tests and screenshots
// must not depend on the browser's language, and times are shown in UTC because
// the fleet spans machines.

const DASH = '—';

/** 45000 → "45,000"; null → "—". */
export function fmtInt(n) {
  if (n === null || n === undefined || !Number.isFinite(Number(n))) return DASH;
  const v = Math.round(Number(n));
  const s = String(Math.abs(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return v < 0 ? '-' + s : s;
}

/** A float with fixed decimals; null → "—". */
export function fmtNum(x, digits = 2) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return DASH;
  return Number(x).toFixed(digits);
}

/** A signed float, e.g. an advantage: "+0.50" / "-0.25". */
export function fmtSigned(x, digits = 2) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return DASH;
  const v = Number(x);
  return (v > 0 ? '+' : '') + v.toFixed(digits);
}

/** 0.5 → "50%". */
export function fmtPct(x) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return DASH;
  return Math.round(Number(x) * 100) + '%';
}

/** Epoch seconds → "2025-12-06 05:46:40" (UTC). */
export function fmtTime(t) {
  if (t === null || t === undefined || !Number.isFinite(Number(t))) return DASH;
  return new Date(Number(t) * 1000).toISOString().replace('T', ' ').slice(0, 19);
}

/** Seconds → "850 ms", "12.3 s", "2m 05s", "1h 02m". */
export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(Number(s))) return DASH;
  const v = Number(s);
  if (v < 0) return '-' + fmtDuration(-v);
  if (v < 1) return Math.round(v * 1000) + ' ms';
  if (v < 60) return v.toFixed(1) + ' s';
  if (v < 3600) {
    const m = Math.floor(v / 60);
    return m + 'm ' + String(Math.floor(v - m * 60)).padStart(2, '0') + 's';
  }
  const h = Math.floor(v / 3600);
  return h + 'h ' + String(Math.floor((v - h * 3600) / 60)).padStart(2, '0') + 'm';
}

/** A logprob for a hover title: 4 decimals, or null when not recorded. */
export function fmtLogprob(lp) {
  if (lp === null || lp === undefined || !Number.isFinite(Number(lp))) return null;
  return Number(lp).toFixed(4);
}
