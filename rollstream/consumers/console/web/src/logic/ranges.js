// Axis ranges for uPlot: a single point (or none) would give a zero-width range,
// which uPlot widens to something arbitrary (years of time, a hundred versions).

/**
 * [min, max] widened by `pad` on each side when the data spans no width.
 * @param {number|null|undefined} min
 * @param {number|null|undefined} max
 * @param {number} pad
 * @returns {[number, number]}
 */
export function paddedRange(min, max, pad) {
  if (min === null || min === undefined || max === null || max === undefined) return [0, 2 * pad];
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 2 * pad];
  if (max - min <= 0) return [min - pad, max + pad];
  return [min, max];
}

/** The range of policy versions: half a version of room on each side, always. */
export function versionRange(min, max) {
  const [lo, hi] = paddedRange(min, max, 0);
  return [lo - 0.5, hi + 0.5];
}
