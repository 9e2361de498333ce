/** Clock skew every token and time check tolerates between our clocks and a caller's. */
export const CLOCK_SKEW_SECONDS = 30;
