/**
 * A small bar chart of hourly counts for a table cell: one bar per hour,
 * oldest first, the y axis from 0 to the largest count (an hour without
 * requests has no bar, never a made-up one), the x axis exactly the hours
 * given. The counts are also in its label and each bar's title, for screen
 * readers and a hover.
 */
export function Sparkline({ values, label, endMs }: { values: number[]; label: string; endMs: number }) {
  const width = 120;
  const height = 28;
  const max = Math.max(0, ...values);
  const step = width / Math.max(1, values.length);
  const hourOf = (i: number) => {
    const start = new Date(endMs - (values.length - i) * 3_600_000);
    return `${String(start.getUTCHours()).padStart(2, "0")}:00 UTC`;
  };
  return (
    <svg
      className="sparkline"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      aria-label={`${label}: ${values.join(", ")}`}
      data-max={max}
      data-bars={values.length}
    >
      <line x1="0" y1={height - 0.5} x2={width} y2={height - 0.5} className="sparkline-axis" />
      {values.map((v, i) =>
        v > 0 ? (
          <rect
            key={i}
            x={i * step + 0.5}
            width={Math.max(1, step - 1)}
            y={height - 1 - Math.max(1, (v / max) * (height - 2))}
            height={Math.max(1, (v / max) * (height - 2))}
          >
            <title>
              {hourOf(i)}: {v.toLocaleString()}
            </title>
          </rect>
        ) : null,
      )}
    </svg>
  );
}
