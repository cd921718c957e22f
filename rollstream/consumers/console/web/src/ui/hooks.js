import { useEffect, useRef, useState } from 'preact/hooks';
import { parseHash } from '../logic/route.js';

/** The current hash route, updated on hashchange. */
export function useHashRoute() {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

/**
 * Load data now and, if intervalMs is set, again that long after each answer
 * (not on a fixed clock, so a slow server is never asked twice at once).
 * Keeps the last data while a new load is in flight so tables do not flicker.
 */
export function usePoll(load, deps, intervalMs = null) {
  const [state, setState] = useState({ data: undefined, error: null });
  useEffect(() => {
    let alive = true;
    let timer = null;
    const tick = async () => {
      try {
        const data = await load();
        if (alive) setState({ data, error: null });
      } catch (error) {
        if (alive) setState((s) => ({ data: s.data, error }));
      }
      if (alive && intervalMs) timer = setTimeout(tick, intervalMs);
    };
    tick();
    return () => {
      alive = false;
      clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return state;
}

/** A value that follows `value` after it has been still for `ms`. */
export function useDebounced(value, ms) {
  const [v, setV] = useState(value);
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return undefined;
    }
    const t = setTimeout(() => setV(value), ms);
    return () => clearTimeout(t);
  }, [value, ms]);
  return v;
}
