package dev.fluvial.reference.differential;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.BranchedKStream;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.Stores;

/**
 * A generated case's topology, built with Kafka Streams' DSL; the twin of
 * src/fluvial/verify/differential/build.py. The case lists nodes with their inputs first; each names
 * its operator, its named functions ({@link Functions}) and the key and value forms of its output,
 * from which every serde is chosen explicitly.
 */
@SuppressWarnings({"unchecked", "rawtypes"})
final class CaseBuilder {
  private static final Serde<String> STRING = Serdes.String();
  private static final Serde<Long> LONG = Serdes.Long();

  private final StreamsBuilder builder;
  private final Map<String, Object> built = new HashMap<>();
  private final Map<String, JsonNode> nodes = new HashMap<>();
  private final Map<String, Map<String, KStream>> splits = new HashMap<>();

  CaseBuilder(StreamsBuilder builder) {
    this.builder = builder;
  }

  static Serde valueSerde(String rep) {
    return rep.equals("s") ? STRING : LONG;
  }

  static Serde keySerde(String keyType) {
    if (keyType.equals("s")) {
      return STRING;
    }
    if (keyType.equals("sw")) {
      return WindowedSerdes.sessionWindowedSerdeFrom(String.class);
    }
    return WindowedSerdes.timeWindowedSerdeFrom(String.class, Long.parseLong(keyType.substring(3)));
  }

  private static Duration ms(JsonNode node, String field) {
    return Duration.ofMillis(node.get(field).asLong());
  }

  static Object windows(JsonNode spec) {
    switch (spec.get("type").asText()) {
      case "tumbling":
        return TimeWindows.ofSizeAndGrace(ms(spec, "size"), ms(spec, "grace"));
      case "hopping":
        return TimeWindows.ofSizeAndGrace(ms(spec, "size"), ms(spec, "grace"))
            .advanceBy(ms(spec, "advance"));
      case "sliding":
        return SlidingWindows.ofTimeDifferenceAndGrace(ms(spec, "diff"), ms(spec, "grace"));
      case "session":
        return SessionWindows.ofInactivityGapAndGrace(ms(spec, "gap"), ms(spec, "grace"));
      default:
        throw new IllegalArgumentException("unknown windows " + spec);
    }
  }

  private static String text(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? null : value.asText();
  }

  private static String rep(JsonNode node) {
    String v = text(node, "v");
    return v == null ? "s" : v;
  }

  private static Materialized materialized(JsonNode node) {
    String store = text(node, "store");
    Materialized m = store != null ? Materialized.as(store) : Materialized.with(null, null);
    if (node.hasNonNull("retention")) {
      m = m.withRetention(ms(node, "retention"));
    }
    return m.withKeySerde(STRING).withValueSerde(valueSerde(rep(node)));
  }

  private static Grouped grouped(JsonNode node) {
    String name = text(node, "name");
    Grouped grouped = name != null ? Grouped.as(name) : Grouped.with(null, null);
    return grouped.withKeySerde(STRING).withValueSerde(valueSerde(rep(node)));
  }

  /** Whether a derived table gets a store: named, or anonymous with serdes only. */
  private static boolean materializes(JsonNode node) {
    return node.hasNonNull("store") || node.path("materialize").asBoolean(false);
  }

  void build(JsonNode caseNode) {
    for (JsonNode node : caseNode.get("nodes")) {
      nodes.put(node.get("id").asText(), node);
    }
    for (JsonNode node : caseNode.get("nodes")) {
      List<Object> ins = new ArrayList<>();
      if (node.has("in")) {
        for (JsonNode in : node.get("in")) {
          ins.add(built.get(in.asText()));
        }
      }
      built.put(node.get("id").asText(), build(node, ins));
    }
  }

  private JsonNode input(JsonNode node, int i) {
    return nodes.get(node.get("in").get(i).asText());
  }

  private Object build(JsonNode node, List<Object> ins) {
    String op = node.get("op").asText();
    String rep = rep(node);
    Object src = ins.isEmpty() ? null : ins.get(0);
    KStream stream = src instanceof KStream s ? s : null;
    KTable table = src instanceof KTable t ? t : null;
    switch (op) {
      case "stream":
        return builder.stream(text(node, "topic"), Consumed.with(STRING, STRING));
      case "table":
        {
          Materialized m;
          if (node.hasNonNull("versioned")) {
            m =
                Materialized.as(
                    Stores.persistentVersionedKeyValueStore(
                        text(node, "store"), ms(node, "versioned")));
            m = m.withKeySerde((Serde) STRING).withValueSerde((Serde) STRING);
          } else {
            m = materialized(node);
          }
          return builder.table(text(node, "topic"), Consumed.with(STRING, STRING), m);
        }
      case "global_table":
        return builder.globalTable(
            text(node, "topic"), Consumed.with(STRING, STRING), materialized(node));
      case "filter":
        {
          Functions.Pred p = Functions.lookup(Functions.PREDICATES, text(node, "fn"));
          if (node.path("not").asBoolean(false)) {
            return stream.filterNot((k, v) -> p.test((String) k, Functions.num(v)));
          }
          return stream.filter((k, v) -> p.test((String) k, Functions.num(v)));
        }
      case "map_values":
        {
          Functions.NumFn fn = Functions.lookup(Functions.VALUE_MAPPERS, text(node, "fn"));
          return stream.mapValues(v -> Functions.out(fn.apply(Functions.num(v)), rep));
        }
      case "map":
        {
          Functions.PairFn fn = Functions.lookup(Functions.MAPPERS, text(node, "fn"));
          return stream.map(
              (k, v) -> {
                KeyValue<String, Long> kv = fn.apply((String) k, Functions.num(v));
                return KeyValue.pair(kv.key, Functions.out(kv.value, rep));
              });
        }
      case "select_key":
        {
          Functions.KeyFn fn = Functions.lookup(Functions.KEY_SELECTORS, text(node, "fn"));
          return stream.selectKey((k, v) -> fn.apply((String) k, Functions.num(v)));
        }
      case "flat_map":
        {
          Functions.FlatFn fn = Functions.lookup(Functions.FLAT_MAPPERS, text(node, "fn"));
          return stream.flatMap(
              (k, v) -> {
                List<KeyValue<Object, Object>> out = new ArrayList<>();
                for (KeyValue<String, Long> kv : fn.apply((String) k, Functions.num(v))) {
                  out.add(KeyValue.pair(kv.key, Functions.out(kv.value, rep)));
                }
                return out;
              });
        }
      case "flat_map_values":
        {
          Functions.FlatValueFn fn =
              Functions.lookup(Functions.FLAT_VALUE_MAPPERS, text(node, "fn"));
          return stream.flatMapValues(
              v -> {
                List<Object> out = new ArrayList<>();
                for (Long n : fn.apply(Functions.num(v))) {
                  out.add(Functions.out(n, rep));
                }
                return out;
              });
        }
      case "peek":
        return stream.peek((k, v) -> {});
      case "merge":
        return stream.merge((KStream) ins.get(1));
      case "branch":
        {
          String splitId = text(node, "split");
          Map<String, KStream> branches = splits.get(splitId);
          JsonNode preds = node.get("preds");
          if (branches == null) {
            BranchedKStream branched = stream.split(Named.as(splitId + "-"));
            for (int i = 0; i < preds.size(); i++) {
              Functions.Pred p = Functions.lookup(Functions.PREDICATES, preds.get(i).asText());
              branched =
                  branched.branch(
                      (k, v) -> p.test((String) k, Functions.num(v)), Branched.as(String.valueOf(i)));
            }
            branches = branched.defaultBranch(Branched.as("d"));
            splits.put(splitId, branches);
          }
          int index = node.get("index").asInt();
          return branches.get(splitId + "-" + (index < preds.size() ? String.valueOf(index) : "d"));
        }
      case "repartition":
        return stream.repartition(Repartitioned.with(keySerde(text(node, "k")), valueSerde(rep)));
      case "to_table":
        return stream.toTable(materialized(node));
      case "group_by_key":
        return stream.groupByKey(grouped(node));
      case "group_by":
        {
          Functions.KeyFn fn = Functions.lookup(Functions.KEY_SELECTORS, text(node, "fn"));
          return stream.groupBy((k, v) -> fn.apply((String) k, Functions.num(v)), grouped(node));
        }
      case "windowed_by":
        {
          Object windows = windows(node.get("windows"));
          KGroupedStream grouped = (KGroupedStream) src;
          if (windows instanceof SessionWindows w) {
            return grouped.windowedBy(w);
          }
          TimeWindowedKStream windowed =
              windows instanceof TimeWindows w
                  ? grouped.windowedBy(w)
                  : grouped.windowedBy((SlidingWindows) windows);
          if (node.path("emit_on_close").asBoolean(false)) {
            windowed = windowed.emitStrategy(EmitStrategy.onWindowClose());
          }
          return windowed;
        }
      case "count":
      case "reduce":
      case "aggregate":
        return aggregate(node, src);
      case "cogroup":
        return cogroup(node, ins);
      case "to_stream":
        return table.toStream();
      case "unwindow":
        return stream.selectKey((k, v) -> Functions.unwindow((Windowed<String>) k));
      case "suppress":
        {
          if (text(node, "until").equals("window_close")) {
            return table.suppress(
                Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
          }
          Suppressed.BufferConfig buffer =
              node.hasNonNull("max_records")
                  ? Suppressed.BufferConfig.maxRecords(node.get("max_records").asLong())
                      .emitEarlyWhenFull()
                  : Suppressed.BufferConfig.unbounded();
          return table.suppress(Suppressed.untilTimeLimit(ms(node, "limit_ms"), buffer));
        }
      case "table_filter":
        {
          Functions.Pred p = Functions.lookup(Functions.PREDICATES, text(node, "fn"));
          boolean not = node.path("not").asBoolean(false);
          if (materializes(node)) {
            return not
                ? table.filterNot((k, v) -> p.test((String) k, Functions.num(v)), materialized(node))
                : table.filter((k, v) -> p.test((String) k, Functions.num(v)), materialized(node));
          }
          return not
              ? table.filterNot((k, v) -> p.test((String) k, Functions.num(v)))
              : table.filter((k, v) -> p.test((String) k, Functions.num(v)));
        }
      case "table_map_values":
        {
          Functions.NumFn fn = Functions.lookup(Functions.VALUE_MAPPERS, text(node, "fn"));
          if (materializes(node)) {
            return table.mapValues(
                v -> Functions.out(fn.apply(Functions.num(v)), rep), materialized(node));
          }
          return table.mapValues(v -> Functions.out(fn.apply(Functions.num(v)), rep));
        }
      case "table_group_by":
        {
          Functions.PairFn fn = Functions.lookup(Functions.REGROUPERS, text(node, "fn"));
          return table.groupBy(
              (k, v) -> {
                KeyValue<String, Long> kv = fn.apply((String) k, Functions.num(v));
                return KeyValue.pair(kv.key, Functions.out(kv.value, rep));
              },
              Grouped.with(STRING, valueSerde(rep)));
        }
      case "table_count":
        return ((KGroupedTable) src).count(materialized(node));
      case "table_reduce":
        {
          Functions.Num2 add = Functions.lookup(Functions.REDUCERS, text(node, "fn"));
          Functions.Num2 sub = Functions.lookup(Functions.REDUCERS, text(node, "fn2"));
          return ((KGroupedTable) src)
              .reduce(
                  (a, v) -> Functions.out(add.apply(Functions.num(a), Functions.num(v)), rep),
                  (a, v) -> Functions.out(sub.apply(Functions.num(a), Functions.num(v)), rep),
                  materialized(node));
        }
      case "table_aggregate":
        {
          Long init = Functions.lookup(Functions.INITIALIZERS, text(node, "init"));
          Functions.Agg add = Functions.lookup(Functions.AGGREGATORS, text(node, "fn"));
          Functions.Agg sub = Functions.lookup(Functions.AGGREGATORS, text(node, "fn2"));
          return ((KGroupedTable) src)
              .aggregate(
                  () -> Functions.out(init, rep),
                  (k, v, a) ->
                      Functions.out(add.apply((String) k, Functions.num(v), Functions.num(a)), rep),
                  (k, v, a) ->
                      Functions.out(sub.apply((String) k, Functions.num(v), Functions.num(a)), rep),
                  materialized(node));
        }
      case "ss_join":
        {
          KStream right = (KStream) ins.get(1);
          Functions.Num2 fn = Functions.lookup(Functions.JOINERS, text(node, "fn"));
          JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(ms(node, "diff"), ms(node, "grace"));
          StreamJoined joined =
              StreamJoined.with(
                  STRING, valueSerde(rep(input(node, 0))), valueSerde(rep(input(node, 1))));
          org.apache.kafka.streams.kstream.ValueJoiner joiner =
              (l, r) -> Functions.out(fn.apply(Functions.num(l), Functions.num(r)), rep);
          switch (text(node, "kind")) {
            case "inner":
              return stream.join(right, joiner, windows, joined);
            case "left":
              return stream.leftJoin(right, joiner, windows, joined);
            default:
              return stream.outerJoin(right, joiner, windows, joined);
          }
        }
      case "st_join":
        {
          KTable right = (KTable) ins.get(1);
          Functions.Num2 fn = Functions.lookup(Functions.JOINERS, text(node, "fn"));
          Joined joined =
              Joined.with(STRING, valueSerde(rep(input(node, 0))), valueSerde(rep(input(node, 1))));
          org.apache.kafka.streams.kstream.ValueJoiner joiner =
              (l, r) -> Functions.out(fn.apply(Functions.num(l), Functions.num(r)), rep);
          return text(node, "kind").equals("left")
              ? stream.leftJoin(right, joiner, joined)
              : stream.join(right, joiner, joined);
        }
      case "tt_join":
        {
          KTable right = (KTable) ins.get(1);
          Functions.Num2 fn = Functions.lookup(Functions.JOINERS, text(node, "fn"));
          org.apache.kafka.streams.kstream.ValueJoiner joiner =
              (l, r) -> Functions.out(fn.apply(Functions.num(l), Functions.num(r)), rep);
          boolean store = node.hasNonNull("store");
          switch (text(node, "kind")) {
            case "inner":
              return store ? table.join(right, joiner, materialized(node)) : table.join(right, joiner);
            case "left":
              return store
                  ? table.leftJoin(right, joiner, materialized(node))
                  : table.leftJoin(right, joiner);
            default:
              return store
                  ? table.outerJoin(right, joiner, materialized(node))
                  : table.outerJoin(right, joiner);
          }
        }
      case "fk_join":
        {
          KTable right = (KTable) ins.get(1);
          Functions.Num2 fn = Functions.lookup(Functions.JOINERS, text(node, "fn"));
          Functions.ForeignKeyFn fk = Functions.lookup(Functions.FOREIGN_KEYS, text(node, "fk"));
          org.apache.kafka.streams.kstream.ValueJoiner joiner =
              (l, r) -> Functions.out(fn.apply(Functions.num(l), Functions.num(r)), rep);
          java.util.function.Function extractor = v -> fk.apply(Functions.num(v));
          boolean left = text(node, "kind").equals("left");
          // Always materialized with serdes: the join's response topic needs the value serde.
          return left
              ? table.leftJoin(right, extractor, joiner, materialized(node))
              : table.join(right, extractor, joiner, materialized(node));
        }
      case "sg_join":
        {
          GlobalKTable right = (GlobalKTable) ins.get(1);
          Functions.Num2 fn = Functions.lookup(Functions.JOINERS, text(node, "fn"));
          Functions.KeyFn key = Functions.lookup(Functions.GLOBAL_KEYS, text(node, "key"));
          org.apache.kafka.streams.kstream.KeyValueMapper selector =
              (k, v) -> key.apply((String) k, Functions.num(v));
          org.apache.kafka.streams.kstream.ValueJoiner joiner =
              (l, r) -> Functions.out(fn.apply(Functions.num(l), Functions.num(r)), rep);
          return text(node, "kind").equals("left")
              ? stream.leftJoin(right, selector, joiner)
              : stream.join(right, selector, joiner);
        }
      case "to":
        stream.to(text(node, "topic"), Produced.with(keySerde(text(node, "k")), valueSerde(rep)));
        return null;
      default:
        throw new IllegalArgumentException("unknown operator " + op);
    }
  }

  private Object aggregate(JsonNode node, Object src) {
    String op = node.get("op").asText();
    String rep = rep(node);
    Materialized m = materialized(node);
    Functions.Num2 reducer =
        op.equals("reduce") ? Functions.lookup(Functions.REDUCERS, text(node, "fn")) : null;
    org.apache.kafka.streams.kstream.Reducer r =
        (a, v) -> Functions.out(reducer.apply(Functions.num(a), Functions.num(v)), rep);
    Long init =
        op.equals("aggregate") ? Functions.lookup(Functions.INITIALIZERS, text(node, "init")) : null;
    Functions.Agg agg =
        op.equals("aggregate") ? Functions.lookup(Functions.AGGREGATORS, text(node, "fn")) : null;
    org.apache.kafka.streams.kstream.Initializer i = () -> Functions.out(init, rep);
    org.apache.kafka.streams.kstream.Aggregator a =
        (k, v, x) -> Functions.out(agg.apply((String) k, Functions.num(v), Functions.num(x)), rep);
    if (src instanceof KGroupedStream g) {
      switch (op) {
        case "count":
          return g.count(m);
        case "reduce":
          return g.reduce(r, m);
        default:
          return g.aggregate(i, a, m);
      }
    }
    if (src instanceof TimeWindowedKStream w) {
      switch (op) {
        case "count":
          return w.count(m);
        case "reduce":
          return w.reduce(r, m);
        default:
          return w.aggregate(i, a, m);
      }
    }
    SessionWindowedKStream s = (SessionWindowedKStream) src;
    switch (op) {
      case "count":
        return s.count(m);
      case "reduce":
        return s.reduce(r, m);
      default:
        {
          Functions.Agg merge = Functions.lookup(Functions.MERGERS, text(node, "merger"));
          org.apache.kafka.streams.kstream.Merger merger =
              (k, x, y) -> Functions.out(merge.apply((String) k, Functions.num(x), Functions.num(y)), rep);
          return s.aggregate(i, a, merger, m);
        }
    }
  }

  private Object cogroup(JsonNode node, List<Object> ins) {
    String rep = rep(node);
    JsonNode fns = node.get("fns");
    CogroupedKStream cogrouped = null;
    for (int n = 0; n < ins.size(); n++) {
      Functions.Agg agg = Functions.lookup(Functions.AGGREGATORS, fns.get(n).asText());
      org.apache.kafka.streams.kstream.Aggregator a =
          (k, v, x) -> Functions.out(agg.apply((String) k, Functions.num(v), Functions.num(x)), rep);
      cogrouped =
          cogrouped == null
              ? ((KGroupedStream) ins.get(n)).cogroup(a)
              : cogrouped.cogroup((KGroupedStream) ins.get(n), a);
    }
    Long init = Functions.lookup(Functions.INITIALIZERS, text(node, "init"));
    org.apache.kafka.streams.kstream.Initializer i = () -> Functions.out(init, rep);
    Materialized m = materialized(node);
    if (!node.hasNonNull("windows")) {
      return cogrouped.aggregate(i, m);
    }
    Object windows = windows(node.get("windows"));
    if (windows instanceof SessionWindows w) {
      Functions.Agg merge = Functions.lookup(Functions.MERGERS, text(node, "merger"));
      SessionWindowedCogroupedKStream s = cogrouped.windowedBy(w);
      return s.aggregate(
          i,
          (k, x, y) -> Functions.out(merge.apply((String) k, Functions.num(x), Functions.num(y)), rep),
          m);
    }
    TimeWindowedCogroupedKStream t =
        windows instanceof TimeWindows w
            ? cogrouped.windowedBy(w)
            : cogrouped.windowedBy((SlidingWindows) windows);
    return t.aggregate(i, m);
  }
}
