package dev.fluvial.reference.differential;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Windowed;

/**
 * The named user functions of generated cases, implemented identically in
 * src/fluvial/verify/differential/functions.py.
 *
 * <p>Values are small numbers (0..999) carried as strings or longs; a function reads a value as a
 * number (null stays null) and the case says in which form ("s" or "l") its result travels on.
 * Every function is total over its inputs, nulls included.
 */
final class Functions {
  static final long MOD = 1000;

  private Functions() {}

  static Long num(Object value) {
    if (value == null) {
      return null;
    }
    if (value instanceof Long l) {
      return l;
    }
    return Long.parseLong((String) value);
  }

  static Object out(Long number, String rep) {
    if (number == null) {
      return null;
    }
    return rep.equals("s") ? Long.toString(number) : number;
  }

  private static long or0(Long n) {
    return n == null ? 0 : n;
  }

  private static long keySum(String key) {
    long sum = 0;
    for (int i = 0; i < key.length(); i++) {
      sum += key.charAt(i);
    }
    return sum;
  }

  interface Pred {
    boolean test(String key, Long n);
  }

  interface NumFn {
    Long apply(Long n);
  }

  interface KeyFn {
    String apply(String key, Long n);
  }

  interface PairFn {
    KeyValue<String, Long> apply(String key, Long n);
  }

  interface FlatFn {
    List<KeyValue<String, Long>> apply(String key, Long n);
  }

  interface FlatValueFn {
    List<Long> apply(Long n);
  }

  interface Num2 {
    Long apply(Long a, Long b);
  }

  interface Agg {
    Long apply(String key, Long n, Long agg);
  }

  static final Map<String, Pred> PREDICATES =
      Map.of(
          "v_even", (k, n) -> n != null && n % 2 == 0,
          "v_small", (k, n) -> n != null && n < 500,
          "v_div3", (k, n) -> n != null && n % 3 == 0,
          "v_null", (k, n) -> n == null,
          "k_hash", (k, n) -> k != null && keySum(k) % 3 != 0);

  static final Map<String, NumFn> VALUE_MAPPERS =
      Map.of(
          "inc", n -> n == null ? null : (n + 1) % MOD,
          "dbl", n -> n == null ? null : (2 * n) % MOD,
          "sq7", n -> n == null ? null : (n * n + 7) % MOD,
          "null_if_7", n -> n == null || n % 7 == 0 ? null : n,
          "zero_if_null", n -> n == null ? 0L : n);

  static final Map<String, KeyFn> KEY_SELECTORS =
      Map.of(
          "k_by_v", (k, n) -> n == null ? null : "k" + (n % 4),
          "k_suffix", (k, n) -> k == null ? null : k + "x",
          "k_null_if_5", (k, n) -> n != null && n % 5 == 0 ? null : k,
          "k_const", (k, n) -> "k0",
          "k_first", (k, n) -> k == null ? null : k.substring(0, Math.min(2, k.length())));

  static final Map<String, PairFn> MAPPERS =
      Map.of(
          "rekey_inc",
              (k, n) -> n == null ? KeyValue.pair(k, null) : KeyValue.pair("k" + (n % 3), (n + 1) % MOD),
          "identity", (k, n) -> KeyValue.pair(k, n));

  static final Map<String, FlatFn> FLAT_MAPPERS =
      Map.of(
          "fan2",
              (k, n) -> {
                List<KeyValue<String, Long>> out = new ArrayList<>();
                if (n == null) {
                  out.add(KeyValue.pair(k, null));
                } else {
                  out.add(KeyValue.pair(k, n));
                  out.add(KeyValue.pair("k" + (n % 2), (n + 1) % MOD));
                }
                return out;
              },
          "drop_odd",
              (k, n) -> {
                List<KeyValue<String, Long>> out = new ArrayList<>();
                if (n != null && n % 2 == 0) {
                  out.add(KeyValue.pair(k, n));
                }
                return out;
              });

  static final Map<String, FlatValueFn> FLAT_VALUE_MAPPERS =
      Map.of(
          "fanv",
              n -> {
                List<Long> out = new ArrayList<>();
                if (n != null && n % 3 != 0) {
                  out.add(n);
                  out.add((n + 3) % MOD);
                }
                return out;
              },
          "dupv",
              n -> {
                List<Long> out = new ArrayList<>();
                out.add(n);
                out.add(n);
                return out;
              });

  static final Map<String, Num2> REDUCERS =
      Map.of(
          "sum", (a, n) -> (or0(a) + or0(n)) % MOD,
          "max", (a, n) -> Math.max(or0(a), or0(n)),
          "sub", (a, n) -> Math.floorMod(or0(a) - or0(n), MOD));

  static final Map<String, Agg> AGGREGATORS =
      Map.of(
          "agg_sum", (k, n, a) -> (or0(a) + or0(n)) % MOD,
          "agg_mix", (k, n, a) -> (or0(a) * 3 + or0(n) + (k == null ? 0 : k.length())) % MOD,
          "agg_sub", (k, n, a) -> Math.floorMod(or0(a) - or0(n), MOD),
          "agg_unmix", (k, n, a) -> (or0(a) * 7 + or0(n)) % MOD);

  static final Map<String, Long> INITIALIZERS = Map.of("zero", 0L, "one", 1L);

  static final Map<String, Agg> MERGERS =
      Map.of("merge_sum", (k, a, b) -> (or0(a) + or0(b)) % MOD);

  static final Map<String, Num2> JOINERS =
      Map.of(
          "jn",
          (l, r) -> {
            long a = l == null ? 997 : l;
            long b = r == null ? 991 : r;
            return (a * 31 + b) % MOD;
          });

  interface ForeignKeyFn {
    String apply(Long n);
  }

  static final Map<String, ForeignKeyFn> FOREIGN_KEYS =
      Map.of("fk_v", n -> n == null ? null : "k" + (n % 5));

  static final Map<String, KeyFn> GLOBAL_KEYS =
      Map.of("gk_v", (k, n) -> n == null ? null : "k" + (n % 5), "gk_k", (k, n) -> k);

  static final Map<String, PairFn> REGROUPERS =
      Map.of(
          "regroup_v", (k, n) -> KeyValue.pair(n == null ? null : "k" + (n % 3), n),
          "regroup_const", (k, n) -> KeyValue.pair("all", n));

  static String unwindow(Windowed<String> key) {
    return key.key() + "@" + key.window().start();
  }

  static <T> T lookup(Map<String, T> table, String name) {
    T fn = table.get(name);
    if (fn == null) {
      throw new IllegalArgumentException("unknown function " + name);
    }
    return fn;
  }
}
