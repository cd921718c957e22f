// A thin Preact wrapper around uPlot. The plot is created once per `opts`
// object (callers keep opts stable) and fed new data with setData, which is
// much cheaper than rebuilding it every second.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { html } from './html.js';

// Times in the console are UTC; make the chart axes agree with the tables.
export const utc = (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC');

export function Chart({ testid, opts, data, height = 200 }) {
  const box = useRef(null);
  const plot = useRef(null);

  useEffect(() => {
    const el = box.current;
    plot.current = new uPlot({ ...opts, width: Math.max(200, el.clientWidth), height }, data, el);
    const ro = new ResizeObserver(() => {
      if (plot.current && el.clientWidth) plot.current.setSize({ width: el.clientWidth, height });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [opts, height]);

  const created = useRef(false);
  useEffect(() => {
    // The first data went in with the constructor.
    if (!created.current) {
      created.current = true;
      return;
    }
    if (plot.current) plot.current.setData(data);
  }, [data]);

  return html`<div class="chart" data-testid=${testid} ref=${box}></div>`;
}
