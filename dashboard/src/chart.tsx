/**
 * A time-series chart on uPlot: x in seconds since the epoch, one line per
 * series. Re-created when the data changes, resized with its container.
 * The axis and legend read the times in `timeZone` (uPlot's default is the
 * browser's zone, which labels a UTC day as the day before west of UTC).
 */
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Series {
  label: string;
  values: (number | null)[];
}

const COLORS = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#f59f00", "#0c8599", "#e64980", "#5c7cfa"];

export function TimeChart({
  x,
  series,
  height = 260,
  label,
  timeZone,
}: {
  x: number[];
  series: Series[];
  height?: number;
  label: string;
  /** An IANA zone for the axis labels; the browser's zone when absent. */
  timeZone?: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    const axis = {
      stroke: dark ? "#c9d1d9" : "#333",
      grid: { stroke: dark ? "#30363d" : "#e5e5e5" },
      ticks: { stroke: dark ? "#30363d" : "#ccc" },
    };
    const plot = new uPlot(
      {
        width: Math.max(280, el.clientWidth),
        height,
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            points: { show: x.length < 60 },
          })),
        ],
        axes: [axis, axis],
        scales: { x: { time: true } },
        ...(timeZone ? { tzDate: (ts: number) => uPlot.tzDate(new Date(ts * 1000), timeZone) } : {}),
      },
      [x, ...series.map((s) => s.values)] as uPlot.AlignedData,
      el,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(280, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [x, series, height, timeZone]);
  return <div ref={box} className="chart" role="img" aria-label={label} />;
}
