package dev.fluvial.reference.nexmark;

import java.time.LocalDate;

/**
 * The columns the q11–q22 twins derive from a bid, as fluvial's {@code queries/_columns.py}
 * computes them: {@code DATE_FORMAT(dateTime, 'yyyy-MM-dd')}, {@code 'HH:mm'} and {@code
 * HOUR(dateTime)} read in UTC, and the price ranks of q15–q17 (0 below 10,000, 1 below
 * 1,000,000, 2 above: the SQL's ranks 1 to 3).
 */
final class Columns {
  static final long MS_PER_DAY = 86_400_000L;
  static final long RANK1_BELOW = 10_000;
  static final long RANK2_BELOW = 1_000_000;

  private Columns() {}

  /** {@code yyyy-MM-dd} of an epoch-millisecond time, in UTC. */
  static String day(long dateTimeMs) {
    return LocalDate.ofEpochDay(Math.floorDiv(dateTimeMs, MS_PER_DAY)).toString();
  }

  /** {@code HH:mm} of an epoch-millisecond time, in UTC. */
  static String minute(long dateTimeMs) {
    long minutes = Math.floorMod(Math.floorDiv(dateTimeMs, 60_000L), 1440L);
    long h = minutes / 60;
    long m = minutes % 60;
    return new String(
        new char[] {
          (char) ('0' + h / 10), (char) ('0' + h % 10), ':', (char) ('0' + m / 10),
          (char) ('0' + m % 10)
        });
  }

  /** The hour of the day (0–23), in UTC. */
  static int hour(long dateTimeMs) {
    return (int) Math.floorMod(Math.floorDiv(dateTimeMs, 3_600_000L), 24L);
  }

  /** 0, 1 or 2 for the SQL's price rank 1, 2 or 3. */
  static int priceRank(long price) {
    if (price < RANK1_BELOW) {
      return 0;
    }
    return price < RANK2_BELOW ? 1 : 2;
  }
}
