/**
 * A time-series chart on uPlot: x in seconds since the epoch, one line per
 * series. Re-created when the data changes, resized with its container.
 *
 * What it draws is what happened: the x-axis spans exactly `range` (the range
 * the operator chose, not the first and last point), its ticks are calendar
 * boundaries in `timeZone` no finer than the buckets (`unit`: days for a daily
 * chart), the y-axis starts at 0, and each series has its own dash pattern and
 * marker size besides its colour, so two series with the same counts stay
 * visible (a smaller marker inside a larger ring, dashes of both colours).
 * uPlot's own labels read the browser's zone, which names a UTC day as the day
 * before west of UTC; here every label is made in `timeZone`.
 *
 * The drawn axis is written onto the element (`data-x-min`, `data-x-max`,
 * `data-y-min` in seconds and counts; `data-x-splits` the ticks in seconds and
 * `data-x-ticks` their labels, as JSON),
 * from uPlot's own draw, so tests read what is on the canvas.
 */
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { bucketLabel, tickLabels, timeTicks, type BucketUnit } from "./time-buckets.ts";

export interface Series {
  label: string;
  values: (number | null)[];
}

const COLORS = ["#1f6feb", "#d9480f", "#2f9e44", "#ae3ec9", "#f59f00", "#0c8599", "#e64980", "#5c7cfa"];
/** Dash patterns in turn: solid, long dashes, short dashes, dash-dot, ... */
const DASHES: number[][] = [[], [10, 5], [3, 4], [12, 4, 3, 4], [6, 3], [1, 3], [16, 6], [8, 3, 1, 3, 1, 3]];
/** Points at most this many are drawn with markers (beyond, they would merge into a band). */
const MARKERS_UP_TO = 100;

export function TimeChart({
  x,
  series,
  height = 260,
  label,
  timeZone = "UTC",
  unit,
  range,
  starts,
  integers = true,
}: {
  x: number[];
  series: Series[];
  height?: number;
  label: string;
  /** An IANA zone for the axis and legend labels. */
  timeZone?: string;
  /** The buckets' calendar unit: the finest tick the axis uses. */
  unit: BucketUnit;
  /** The x-axis span in seconds; the first and last point when absent. */
  range?: [number, number];
  /** The start (seconds) of the bucket each point counts, named in the legend; `x` when absent. */
  starts?: number[];
  /** Whole numbers only on the y-axis (counts); false for sums and averages. */
  integers?: boolean;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    const background = dark ? "#0d1117" : "#fff";
    const axis = {
      stroke: dark ? "#c9d1d9" : "#333",
      grid: { stroke: dark ? "#30363d" : "#e5e5e5" },
      ticks: { stroke: dark ? "#30363d" : "#ccc" },
    };
    const [min, max] = range ?? [x[0] ?? 0, x[x.length - 1] ?? 1];
    const named = starts ?? x;
    let drawnLabels: string[] = [];
    let drawnSplits: number[] = [];
    const plot = new uPlot(
      {
        width: Math.max(280, el.clientWidth),
        height,
        series: [
          {
            label: "Time",
            value: (_u, _v, _s, idx) => (idx == null ? "—" : bucketLabel(named[idx] * 1000, unit, timeZone)),
          },
          ...series.map((s, i) => {
            const color = COLORS[i % COLORS.length];
            return {
              label: s.label,
              stroke: color,
              // The first line a little wider: under an equal dashed one it still shows at both edges.
              width: i === 0 ? 3 : 2,
              dash: DASHES[i % DASHES.length],
              value: (_u: uPlot, v: number | null) => (v == null ? "—" : v.toLocaleString()),
              points: {
                show: x.length <= MARKERS_UP_TO,
                // Each later series' marker is smaller, so an equal one leaves the earlier as a ring around it.
                size: Math.max(5, 16 - 6 * i),
                width: 2,
                stroke: color,
                fill: i === 0 ? background : color,
              },
            };
          }),
        ],
        legend: {
          markers: {
            width: 3,
            dash: (_u: uPlot, i: number) =>
              (DASHES[(i - 1) % DASHES.length]?.length ?? 0) === 0
                ? "solid"
                : DASHES[(i - 1) % DASHES.length][0] <= 3
                  ? "dotted"
                  : "dashed",
          },
        },
        axes: [
          {
            ...axis,
            size: 56,
            splits: (u, _axis, lo, hi) => {
              const { ticks } = timeTicks(lo * 1000, hi * 1000, unit, timeZone, u.bbox.width / devicePixelRatio);
              return ticks.map((t) => t / 1000);
            },
            values: (u, splits) => {
              const lo = u.scales.x.min ?? min;
              const hi = u.scales.x.max ?? max;
              const { step } = timeTicks(lo * 1000, hi * 1000, unit, timeZone, u.bbox.width / devicePixelRatio);
              drawnSplits = splits;
              drawnLabels = tickLabels(
                splits.map((s) => s * 1000),
                step,
                timeZone,
              );
              return drawnLabels;
            },
          },
          {
            ...axis,
            // Counts: whole numbers only (uPlot's own steps, fractions included, for sums and averages).
            ...(integers
              ? {
                  incrs: [
                    1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7,
                  ],
                }
              : {}),
            values: (_u, splits) => splits.map((v) => v.toLocaleString()),
          },
        ],
        scales: {
          x: { time: true, range: () => [min, max] },
          y: {
            // From 0, or below it when a minimum or a sum is negative.
            range: (_u, lo, hi) => [
              lo < 0 ? uPlot.rangeNum(lo, Math.max(hi, 0), 0.1, true)[0]! : 0,
              hi > 0 ? uPlot.rangeNum(Math.min(lo, 0), hi, 0.1, true)[1]! : 1,
            ],
          },
        },
        hooks: {
          draw: [
            (u) => {
              el.dataset.xMin = String(u.scales.x.min);
              el.dataset.xMax = String(u.scales.x.max);
              el.dataset.yMin = String(u.scales.y.min);
              el.dataset.xTicks = JSON.stringify(drawnLabels);
              el.dataset.xSplits = JSON.stringify(drawnSplits);
            },
          ],
        },
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
  }, [x, series, height, timeZone, unit, range, starts, integers]);
  return <div ref={box} className="chart" role="img" aria-label={label} />;
}
