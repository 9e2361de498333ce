/** A controllable clock for the injected `clock` dependency: no sleeps in tests. */
export function createTestClock(start = new Date(), options: { followRealTime?: boolean } = {}) {
  let now = start.getTime();
  // Following real time (plus every advance) keeps it in step with a real server beside core, such
  // as the identity provider, whose tokens a frozen clock would see as issued in the future.
  const offset = () => (options.followRealTime ? Date.now() - start.getTime() : 0);
  const clock = () => new Date(now + offset());
  clock.advance = (ms: number) => {
    now += ms;
  };
  clock.set = (d: Date) => {
    now = d.getTime() - offset();
  };
  return clock;
}

export type TestClock = ReturnType<typeof createTestClock>;
