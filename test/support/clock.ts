/** A controllable clock for the injected `clock` dependency: no sleeps in tests. */
export function createTestClock(start = new Date()) {
  let now = start.getTime();
  const clock = () => new Date(now);
  clock.advance = (ms: number) => {
    now += ms;
  };
  clock.set = (d: Date) => {
    now = d.getTime();
  };
  return clock;
}

export type TestClock = ReturnType<typeof createTestClock>;
