/**
 * Fair shares of the process when it is saturated (docs/api.md#rate-limits). An app's own limits bound
 * what it may do alone, but on a small machine even an app within its limits can keep the one event loop
 * busy, and every other app's calls then wait behind its work. So, when the event loop was busy more
 * than `busyAbove` of the last tick, the apps that asked for more than their equal share of the calls
 * get a budget of calls per tick, cut by a factor each saturated tick and raised again each quiet one
 * (additive increase, multiplicative decrease, as TCP shares a link); a call past its app's budget is
 * refused at its head, before its body is read. An app at or below its share is never refused here, nor
 * an app asking for fewer than `minRate` calls a second (nor is a budget ever below it), nor an app alone
 * on the instance: its own limits are its only bound.
 *
 * The loop's utilization counts the time a call waits for the CPU too: on a machine whose other
 * processes take the CPU, the calls wait all the same, and the apps' shares matter more, not less.
 * A share is of the calls asked for (smoothed over about a second), refused ones included and a refusal
 * paused before its answer counting on every tick it waits: an app held to its budget still asks for
 * more than the others, and an app let in at once never looks above a share that the other's budget
 * made small.
 *
 * Nothing here runs per call but a map lookup and two counts: the load is read once a tick, off the
 * calls' path. Each instance decides for itself.
 */
import { performance } from "node:perf_hooks";

export interface FairShareOptions {
  /** The event-loop utilization (0 to 1) above which a tick counts as saturated. */
  busyAbove: number;
  /** Calls a second an app may always ask for without being refused here. */
  minRate: number;
  /** The tick (ms): how often the load is read and budgets adjusted. */
  tickMs?: number;
  /** The load of the last tick (0 to 1); defaults to the event loop's utilization (tests may pass their own). */
  load?: () => number;
}

export interface FairShare {
  /**
   * Counts a call of `appId` at its head, as `weight` calls (a batch of events weighs more than a listing);
   * false when the app is over its budget (refuse it).
   */
  admit(appId: string, weight?: number): boolean;
  /**
   * Counts a refused call of `appId` whose answer is paused (see `rate-limiter.ts`) as asking on every tick
   * until the returned function is called: a paused call still wants in.
   */
  hold(appId: string): () => void;
  /** Stops the tick. */
  stop(): void;
  /** The apps with a budget now, and their budget of calls per tick (metrics and tests). */
  budgets(): Map<string, number>;
}

/** Multiplicative decrease on a saturated tick, increase on a quiet one. */
const DECREASE = 0.7;
const INCREASE = 1.25;
/** Weight of the last tick in an app's smoothed demand (about a second at the default tick). */
const SMOOTHING = 0.2;
/** An app that called within this many ticks shares the process. */
const ACTIVE_TICKS = 10;
/** Apps not seen for this many ticks are forgotten. */
const IDLE_TICKS = 50;

interface AppState {
  /** Calls let in this tick. */
  admitted: number;
  /** Calls asked for this tick, let in or not. */
  asked: number;
  /** Calls asked for a tick, smoothed. */
  demand: number;
  /** Refused calls paused now. */
  held: number;
  /** Calls a tick, while saturation sheds this app; undefined: no budget. */
  budget: number | undefined;
  idleTicks: number;
}

/** The event loop's utilization over each interval between calls. */
function eventLoopLoad(): () => number {
  let last = performance.eventLoopUtilization();
  return () => {
    const now = performance.eventLoopUtilization();
    const utilization = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    return utilization;
  };
}

export function createFairShare(options: FairShareOptions): FairShare {
  const tickMs = options.tickMs ?? 100;
  const minPerTick = (options.minRate * tickMs) / 1000;
  const minBudget = Math.max(1, Math.floor(minPerTick));
  const load = options.load ?? eventLoopLoad();
  const apps = new Map<string, AppState>();

  const tick = () => {
    const saturated = load() > options.busyAbove;
    let total = 0;
    let active = 0;
    for (const s of apps.values()) {
      const asked = s.asked + s.held;
      s.demand = s.demand === 0 ? asked : (1 - SMOOTHING) * s.demand + SMOOTHING * asked;
      total += s.demand;
      // An app counts while it called within the last second or so, however seldom: one call a second
      // waiting behind a flood is what this protects.
      if (s.asked > 0 || s.held > 0 || s.idleTicks < ACTIVE_TICKS) active++;
    }
    const share = active > 0 ? total / active : 0;
    for (const [appId, s] of apps) {
      const above = active > 1 && s.demand > share && s.demand >= minPerTick;
      if (saturated && above) {
        // Never below `minRate`: what an app may always ask for stays let in, whatever else keeps the loop busy.
        s.budget = Math.max(minBudget, Math.floor(Math.min(s.budget ?? s.admitted, s.admitted) * DECREASE));
      } else if (!saturated && s.budget !== undefined) {
        s.budget = s.budget * INCREASE + 1;
        // Once the budget is well above what the app asks for, it no longer binds.
        if (s.budget > 2 * s.demand + minPerTick) s.budget = undefined;
      }
      s.idleTicks = s.asked === 0 && s.held === 0 ? s.idleTicks + 1 : 0;
      // A heavy call let in past the budget leaves the app in debt for the ticks after.
      s.admitted = s.budget === undefined ? 0 : Math.max(0, s.admitted - s.budget);
      s.asked = 0;
      if (s.idleTicks > IDLE_TICKS && s.budget === undefined) apps.delete(appId);
    }
  };
  const timer = setInterval(tick, tickMs);
  timer.unref();

  const stateOf = (appId: string) => {
    let s = apps.get(appId);
    if (!s) apps.set(appId, (s = { admitted: 0, asked: 0, demand: 0, held: 0, budget: undefined, idleTicks: 0 }));
    return s;
  };

  return {
    admit(appId, weight = 1) {
      const s = stateOf(appId);
      s.asked += weight;
      if (s.budget !== undefined && s.admitted >= s.budget) return false;
      s.admitted += weight;
      return true;
    },
    hold(appId) {
      const s = stateOf(appId);
      s.held++;
      let done = false;
      return () => {
        if (done) return;
        done = true;
        s.held--;
      };
    },
    stop: () => clearInterval(timer),
    budgets: () => {
      const out = new Map<string, number>();
      for (const [appId, s] of apps) if (s.budget !== undefined) out.set(appId, s.budget);
      return out;
    },
  };
}
