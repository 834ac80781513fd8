/**
 * The funnel view: the app's own QueryFunnel, run by the admin API for that
 * app (QueryAnalyticsFunnel). Two to eight steps, each an event type with
 * optional conditions, a conversion window, a range, and optionally a
 * breakdown by a property of the first step.
 *
 * Each step is drawn as a bar as long as its share of the first step's users,
 * with its figures written beside it (users, conversion from the first and
 * from the previous step, median time from the previous step), so a person
 * reads the numbers without hovering; with a breakdown, a table of every group
 * and a choice of which one the bars draw.
 */
import { useQuery } from "@connectrpc/connect-query";
import { skipToken, type UseQueryResult } from "@tanstack/react-query";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { queryAnalyticsFunnel } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, ListEventTypesResponse } from "../../../gen/platform/admin/v1/admin_pb.js";
import type { FunnelStepResult } from "../../../gen/platform/analytics/v1/analytics_pb.js";
import { Empty, QueryView, useDebounced } from "../ui.tsx";
import { areDraftConditions, declaredKinds, toConditions, type DraftCondition } from "../condition-drafts.ts";
import { ConditionsEditor } from "../conditions.tsx";
import { RANGES } from "../ranges.ts";
import { EventTypeSelect, RangeFields, rangeBounds, useRangeChoice } from "../range-fields.tsx";
import { formatDuration, formatPercent, formatValue } from "../format.ts";
import { jsonCodec, oneOfCodec, textCodec, useHashState } from "../router.ts";

const MIN_STEPS = 2;
const MAX_STEPS = 8;
const WINDOWS = [
  { label: "1 hour", seconds: 3600 },
  { label: "1 day", seconds: 86_400 },
  { label: "7 days", seconds: 7 * 86_400 },
  { label: "14 days", seconds: 14 * 86_400 },
  { label: "30 days", seconds: 30 * 86_400 },
  { label: "90 days", seconds: 90 * 86_400 },
];
const GROUP_LIMITS = [5, 10, 20, 50];
/** Funnels span at most 366 days: the longest preset range is one year. */
const FUNNEL_RANGES = RANGES.filter((r) => r.hours <= 24 * 366);
const ALL = "\u0000all";

interface DraftStep {
  type: string;
  conditions: DraftCondition[];
}

/** The steps as edited; none until the operator edits them (then the first two types are shown). */
const NO_STEPS: DraftStep[] = [];

/** Whether `value` is a funnel's steps: a link's, which may have been edited by hand. */
function areDraftSteps(value: unknown): value is DraftStep[] {
  return (
    Array.isArray(value) &&
    value.length >= MIN_STEPS &&
    value.length <= MAX_STEPS &&
    value.every(
      (s: Partial<Record<keyof DraftStep, unknown>> | null) =>
        typeof s === "object" && s !== null && typeof s.type === "string" && areDraftConditions(s.conditions),
    )
  );
}

/** The funnel's choices kept in the address (`useHashState`), apart from the Trends view's. */
const STEPS_CODEC = jsonCodec(areDraftSteps);
const WINDOW_CODEC = oneOfCodec(WINDOWS.map((w) => w.seconds));
const LIMIT_CODEC = oneOfCodec(GROUP_LIMITS);

export function FunnelView({ app, types }: { app: App; types: UseQueryResult<ListEventTypesResponse> }) {
  const all = types.data?.types ?? [];
  const first = all[0]?.name ?? "";
  const [steps, setSteps] = useHashState("funnel", NO_STEPS, STEPS_CODEC);
  const [range, setRange] = useRangeChoice(24 * 30, "funnelRange", FUNNEL_RANGES);
  const [windowSeconds, setWindowSeconds] = useHashState("funnelWindow", 7 * 86_400, WINDOW_CODEC);
  const [breakdown, setBreakdown] = useHashState("funnelBy", "", textCodec);
  const [limit, setLimit] = useHashState("funnelLimit", 10, LIMIT_CODEC);
  const [drawn, setDrawn] = useHashState("funnelDrawn", ALL, textCodec);
  // Until the operator edits them, the steps are the first two types (or the one type twice).
  const shown: DraftStep[] =
    steps.length > 0
      ? steps
      : [
          { type: first, conditions: [] },
          { type: all[1]?.name ?? first, conditions: [] },
        ];
  const settled = useDebounced(shown, 500);
  const typeOf = (name: string) => all.find((t) => t.name === name);
  const edit = (change: (s: DraftStep[]) => DraftStep[]) => setSteps(change(shown));
  const firstProperties = declaredKinds(typeOf(shown[0]?.type ?? "")).map(([p]) => p);
  const chosenBreakdown = firstProperties.includes(breakdown) ? breakdown : "";

  const bounds = rangeBounds(range);
  const { since, until } = bounds;
  let problem = bounds.problem;
  const sent = settled.map((s, i) => ({
    type: s.type,
    where: toConditions(s.conditions, typeOf(s.type), (j) => `Step ${i + 1}, condition ${j + 1}`),
  }));
  problem ??= sent.find((s) => s.where.problem)?.where.problem;
  const query = useQuery(
    queryAnalyticsFunnel,
    first && !problem
      ? {
          appId: app.id,
          steps: sent.map((s) => ({ type: s.type, where: s.where.conditions ?? [] })),
          since: timestampFromDate(new Date(since)),
          until: timestampFromDate(new Date(until)),
          windowSeconds: BigInt(windowSeconds),
          breakdown: chosenBreakdown || undefined,
          limit: chosenBreakdown ? limit : undefined,
        }
      : skipToken,
    { refetchInterval: range.hours > 0 ? 10_000 : false, placeholderData: (previous) => previous },
  );
  return (
    <>
      <form className="card" onSubmit={(e) => e.preventDefault()} aria-label="Funnel query">
        <ol className="funnel-steps">
          {shown.map((step, i) => (
            <li key={i} className="funnel-step-form">
              <div className="funnel-step-head">
                <EventTypeSelect
                  label={`Step ${i + 1} event type`}
                  types={all}
                  value={step.type}
                  onChange={(type) => edit((s) => s.map((x, j) => (j === i ? { type, conditions: [] } : x)))}
                />
                <button
                  type="button"
                  className="secondary small"
                  aria-label={`Remove step ${i + 1}`}
                  disabled={shown.length <= MIN_STEPS}
                  onClick={() => edit((s) => s.filter((_, j) => j !== i))}
                >
                  Remove
                </button>
              </div>
              <ConditionsEditor
                drafts={step.conditions}
                onChange={(conditions) => edit((s) => s.map((x, j) => (j === i ? { ...x, conditions } : x)))}
                type={typeOf(step.type)}
                name={`Step ${i + 1} condition`}
                addLabel={`Add a condition to step ${i + 1}`}
              />
            </li>
          ))}
        </ol>
        <button
          type="button"
          className="secondary"
          disabled={shown.length >= MAX_STEPS || all.length === 0}
          onClick={() => edit((s) => [...s, { type: s[s.length - 1]?.type ?? first, conditions: [] }])}
        >
          Add step
        </button>
        <div className="filters funnel-options">
          <label className="field">
            <span>Conversion window</span>
            <select value={windowSeconds} onChange={(e) => setWindowSeconds(Number(e.target.value))}>
              {WINDOWS.map((w) => (
                <option key={w.seconds} value={w.seconds}>
                  {w.label}
                </option>
              ))}
            </select>
          </label>
          <RangeFields ranges={FUNNEL_RANGES} value={range} onChange={setRange} />
          <label className="field">
            <span>Breakdown</span>
            <select value={chosenBreakdown} onChange={(e) => (setBreakdown(e.target.value), setDrawn(ALL))}>
              <option value="">(none)</option>
              {firstProperties.map((p) => (
                <option key={p}>{p}</option>
              ))}
            </select>
          </label>
          {chosenBreakdown ? (
            <label className="field">
              <span>Groups shown</span>
              <select value={limit} onChange={(e) => setLimit(Number(e.target.value))}>
                {GROUP_LIMITS.map((n) => (
                  <option key={n} value={n}>
                    Top {n} and other
                  </option>
                ))}
              </select>
            </label>
          ) : null}
        </div>
        <p className="muted">
          Users are the events' <code>distinctId</code>s: a user starts at their first step-1 event in the range, and
          counts at each later step done in order within the window from that start.
        </p>
      </form>
      {problem ? (
        <p className="error" role="alert">
          {problem}
        </p>
      ) : null}
      <QueryView query={types} what="event types">
        {(t) =>
          t.types.length === 0 ? (
            <Empty title="No event types yet">
              The app registers event types (<code>POST /v1/analytics/types</code>) and logs events with a{" "}
              <code>distinctId</code> (<code>POST /v1/analytics/events</code>); funnels follow those users.
            </Empty>
          ) : (
            <div className="card">
              <QueryView query={query} what="the funnel">
                {(result) => {
                  const groupName = (g: { group?: string; other: boolean }) =>
                    g.other
                      ? `other (${result.otherGroups.toLocaleString()} ${result.otherGroups === 1n ? "group" : "groups"})`
                      : (g.group ?? "(none)");
                  const picked = result.groups.find((g) => groupName(g) === drawn);
                  const bars = picked?.steps ?? result.steps;
                  return (
                    <>
                      {result.groups.length > 0 ? (
                        <label className="field inline">
                          <span>Bars for</span>
                          <select value={picked ? drawn : ALL} onChange={(e) => setDrawn(e.target.value)}>
                            <option value={ALL}>all users</option>
                            {result.groups.map((g) => (
                              <option key={groupName(g)} value={groupName(g)}>
                                {result.breakdown}: {groupName(g)}
                              </option>
                            ))}
                          </select>
                        </label>
                      ) : null}
                      {Number(bars[0]?.users ?? 0) === 0 ? (
                        <Empty title="Nobody started this funnel in the range">
                          Only events with a <code>distinctId</code> count; widen the range or loosen the first step.
                        </Empty>
                      ) : null}
                      <FunnelBars steps={bars} />
                      {result.groups.length > 0 ? (
                        <div className="table-wrap">
                          <table data-testid="funnel-groups">
                            <caption>
                              By {result.breakdown} (the first step's value): users at each step, and the share of the
                              group's first step
                            </caption>
                            <thead>
                              <tr>
                                <th scope="col">{result.breakdown}</th>
                                {result.steps.map((s, i) => (
                                  <th scope="col" className="right" key={i}>
                                    {i + 1}. {s.type}
                                  </th>
                                ))}
                              </tr>
                            </thead>
                            <tbody>
                              {result.groups.map((g) => (
                                <tr key={groupName(g)} className={g.other ? "other-group" : undefined}>
                                  <td>{groupName(g)}</td>
                                  {g.steps.map((s, i) => (
                                    <td className="right" key={i}>
                                      {Number(s.users).toLocaleString()}
                                      {i > 0 ? (
                                        <span className="muted"> ({formatPercent(s.conversionFromFirst)})</span>
                                      ) : null}
                                    </td>
                                  ))}
                                </tr>
                              ))}
                            </tbody>
                          </table>
                        </div>
                      ) : null}
                    </>
                  );
                }}
              </QueryView>
            </div>
          )
        }
      </QueryView>
    </>
  );
}

/** The steps as bars, each with its figures written out. */
function FunnelBars({ steps }: { steps: FunnelStepResult[] }) {
  const top = Math.max(1, Number(steps[0]?.users ?? 0));
  return (
    <ol className="funnel" data-testid="funnel" aria-label="Funnel steps">
      {steps.map((s, i) => {
        const users = Number(s.users);
        return (
          <li key={i} className="funnel-row" data-testid="funnel-step">
            <div className="funnel-label">
              <strong>
                {i + 1}. {s.type}
              </strong>
            </div>
            <div className="funnel-track">
              <div className="funnel-bar-area">
                {/* A step anyone reached stays visible however small its share; one nobody reached is empty. */}
                <div className="funnel-bar" style={{ width: users > 0 ? `max(2px, ${(users / top) * 100}%)` : 0 }} />
              </div>
              <span>
                <span className="funnel-users" data-testid="funnel-users">
                  {users.toLocaleString()}
                </span>{" "}
                <span className="funnel-users-unit">{users === 1 ? "user" : "users"}</span>
              </span>
            </div>
            <dl className="funnel-figures">
              {i > 0 ? (
                <>
                  <div>
                    <dt>from first</dt>
                    <dd data-testid="funnel-from-first">{formatPercent(s.conversionFromFirst)}</dd>
                  </div>
                  <div>
                    <dt>from previous</dt>
                    <dd data-testid="funnel-from-previous">{formatPercent(s.conversionFromPrevious)}</dd>
                  </div>
                  <div>
                    <dt>median time from previous</dt>
                    <dd data-testid="funnel-median">
                      {s.medianSecondsFromPrevious === undefined ? "—" : formatDuration(s.medianSecondsFromPrevious)}
                    </dd>
                  </div>
                </>
              ) : (
                <div>
                  <dt>entered the funnel in the range</dt>
                  <dd>
                    {formatValue(users)} {users === 1 ? "user" : "users"}
                  </dd>
                </div>
              )}
            </dl>
          </li>
        );
      })}
    </ol>
  );
}
