/**
 * The paused refusals' line (src/core/limits/pause-line.ts): pauses that end together are answered a few a
 * turn of the event loop, app by app in turn. Before it, each pause ended on its own timer, and every pause
 * over by then was answered in one stretch of the loop (another app's request, arriving meanwhile, waited
 * for all of them). Turns are counted with a `setImmediate` ticker; nothing here depends on how fast the
 * machine is.
 */
import { describe, expect, it } from "vitest";
import { createPauseLine } from "../../src/core/limits/pause-line.ts";

/** Counts turns of the event loop until stopped. */
function turnCounter() {
  let turn = 0;
  let running = true;
  const tick = () => {
    turn++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    now: () => turn,
    stop: () => void (running = false),
  };
}

describe("the pause line", () => {
  it("answers pauses that end together a few a turn, the apps in turn", async () => {
    const line = createPauseLine({ perTurn: 4 });
    const turns = turnCounter();
    const answered: { app: string; turn: number }[] = [];
    const pause = (app: string) => line.wait(app, 20).then(() => void answered.push({ app, turn: turns.now() }));
    // The flooding app's 40 pauses are asked for first, then the other app's 2: all end within the same few ms.
    const all = [...Array.from({ length: 40 }, () => pause("flood")), pause("steady"), pause("steady")];
    expect(line.size()).toBe(42);
    await Promise.all(all);
    turns.stop();
    expect(line.size()).toBe(0);
    expect(answered).toHaveLength(42);
    const perTurn = new Map<number, number>();
    for (const { turn } of answered) perTurn.set(turn, (perTurn.get(turn) ?? 0) + 1);
    // At most 4 a turn: the loop reads its sockets between every 4 answers.
    expect(Math.max(...perTurn.values())).toBeLessThanOrEqual(4);
    expect(perTurn.size).toBeGreaterThanOrEqual(11);
    // The other app's pauses are answered among the first, in turns with the flood's, not after all 40 of them.
    const steadyAt = answered.flatMap((a, i) => (a.app === "steady" ? [i] : []));
    expect(steadyAt).toHaveLength(2);
    expect(Math.max(...steadyAt)).toBeLessThan(20);
  });

  it("never answers a pause before its time", async () => {
    const line = createPauseLine({ perTurn: 8 });
    const started = performance.now();
    await line.wait("app", 50);
    expect(performance.now() - started).toBeGreaterThanOrEqual(49);
  });
});
