package dev.fluvial.reference.nexmark;

/** An average as q4 and q6 write it: integer average (rounded down), count and sum. */
public record Average(long avg, long count, long sum) {
  static Average of(long sum, long count) {
    return new Average(sum / count, count, sum);
  }
}
