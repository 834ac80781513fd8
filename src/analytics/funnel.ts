/**
 * Funnels (docs/analytics.md "Funnels"). The rules are written out here once
 * (`computeFunnel`, over each step's events that carry a distinctId, from
 * `stepEvents`); the SQL store computes the same in the database
 * (`EventStore.funnel`, so no step's events come to this process) and hands
 * back only counts and middle values, which `funnelAnswer` turns into the
 * same answer.
 *
 * A user starts at their first event of step 1 in `[since, until)`; each
 * later step is their first event of that step after the previous step's
 * (at the same instant only when the two steps are of different types, so one
 * event never counts for two steps) and at most `window` after the start.
 * The breakdown group is the start event's value of the breakdown property.
 */
import type { FunnelCounts, FunnelStepCounts, StepEvent } from "./event-store.ts";

export interface FunnelStepAnswer {
  users: number;
  conversionFromFirst: number;
  conversionFromPrevious: number;
  /** Undefined for the first step, and when nobody reached the step. */
  medianSecondsFromPrevious?: number | undefined;
}

interface FunnelGroupAnswer {
  group: string | null;
  other: boolean;
  steps: FunnelStepAnswer[];
}

export interface FunnelAnswer {
  steps: FunnelStepAnswer[];
  groups: FunnelGroupAnswer[];
  otherGroups: number;
}

function median(values: number[]): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Each step's users and median seconds from the previous step, with the conversions they make. */
function withConversions(figures: readonly { users: number; median: number | undefined }[]): FunnelStepAnswer[] {
  const out: FunnelStepAnswer[] = [];
  figures.forEach(({ users, median }, k) => {
    const first = out[0]?.users ?? users;
    const previous = out[k - 1]?.users ?? users;
    out.push({
      users,
      conversionFromFirst: first === 0 ? 0 : users / first,
      conversionFromPrevious: previous === 0 ? 0 : users / previous,
      medianSecondsFromPrevious: k === 0 ? undefined : median,
    });
  });
  return out;
}

/** The answers of a set of users' paths: how far each got, and the time of each step. */
function answer(paths: readonly number[][], stepCount: number): FunnelStepAnswer[] {
  return withConversions(
    Array.from({ length: stepCount }, (_, k) => {
      const reached = paths.filter((p) => p.length > k);
      return { users: reached.length, median: median(reached.map((p) => (p[k] - p[k - 1]) / 1000)) };
    }),
  );
}

/**
 * The answer of a funnel a store computed (`EventStore.funnel`): the median
 * from the two middle values exactly as `median` takes it from the sorted
 * seconds, so both ways give the same numbers to the last bit.
 */
export function funnelAnswer(counts: FunnelCounts): FunnelAnswer {
  const steps = (list: readonly FunnelStepCounts[]) =>
    withConversions(
      list.map((s) => ({
        users: s.users,
        median:
          s.users === 0 || s.lowerMiddleMs === undefined || s.upperMiddleMs === undefined
            ? undefined
            : s.users % 2 === 1
              ? s.lowerMiddleMs / 1000
              : (s.lowerMiddleMs / 1000 + s.upperMiddleMs / 1000) / 2,
      })),
    );
  return {
    steps: steps(counts.steps),
    groups: counts.groups.map((g) => ({ group: g.group, other: g.other, steps: steps(g.steps) })),
    otherGroups: counts.otherGroups,
  };
}

/**
 * Follows every user through the steps. `events[k]` are step k's events
 * (step 0's in `[since, until)`, the others up to `until + window`), `types[k]`
 * step k's type; `limit` the most groups answered (the rest folded into one).
 */
export function computeFunnel(
  events: readonly (readonly StepEvent[])[],
  {
    types,
    windowMs,
    limit,
    breakdown,
  }: { types: readonly string[]; windowMs: number; limit: number; breakdown: boolean },
): FunnelAnswer {
  // user -> step -> times (sorted below), and the group of the user's first start event
  const byUser = new Map<string, { times: number[][]; start: number; group: string | null }>();
  events.forEach((stepEvents, k) => {
    for (const e of stepEvents) {
      let user = byUser.get(e.distinctId);
      if (!user) byUser.set(e.distinctId, (user = { times: types.map(() => []), start: Infinity, group: null }));
      user.times[k].push(e.at);
      // At the same instant, the least group (null first) wins, so the answer does not depend on the store's order.
      if (k === 0 && (e.at < user.start || (e.at === user.start && (e.group ?? "") < (user.group ?? "")))) {
        user.start = e.at;
        user.group = e.group;
      }
    }
  });
  const paths: { path: number[]; group: string | null }[] = [];
  for (const user of byUser.values()) {
    if (user.times[0].length === 0) continue;
    for (const t of user.times) t.sort((a, b) => a - b);
    const path = [user.times[0][0]];
    for (let k = 1; k < types.length; k++) {
      const previous = path[k - 1];
      const sameType = types[k] === types[k - 1];
      const next = user.times[k].find((t) => (sameType ? t > previous : t >= previous));
      if (next === undefined || next > path[0] + windowMs) break;
      path.push(next);
    }
    paths.push({ path, group: user.group });
  }
  const steps = answer(
    paths.map((p) => p.path),
    types.length,
  );
  if (!breakdown) return { steps, groups: [], otherGroups: 0 };
  const byGroup = new Map<string | null, number[][]>();
  for (const p of paths) {
    let list = byGroup.get(p.group);
    if (!list) byGroup.set(p.group, (list = []));
    list.push(p.path);
  }
  // The groups with the most starting users first (then in group order, null first); the rest folded.
  const order = [...byGroup.entries()].sort(
    (a, b) =>
      b[1].length - a[1].length || (a[0] === b[0] ? 0 : a[0] === null ? -1 : b[0] === null ? 1 : a[0] < b[0] ? -1 : 1),
  );
  const groups: FunnelGroupAnswer[] = order
    .slice(0, limit)
    .map(([group, list]) => ({ group, other: false, steps: answer(list, types.length) }));
  const rest = order.slice(limit);
  if (rest.length > 0)
    groups.push({
      group: null,
      other: true,
      steps: answer(
        rest.flatMap(([, list]) => list),
        types.length,
      ),
    });
  return { steps, groups, otherGroups: rest.length };
}
