package dev.fluvial.reference.nexmark;

import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.streams.StreamsBuilder;

/** The Nexmark queries' Kafka Streams twins, by name ("q11" …). */
public final class Queries {
  /** Adds one query to a builder: its input topics by kind ("person", "auction", "bid"). */
  public interface Query {
    void build(StreamsBuilder b, Map<String, String> topics, String output);
  }

  public static final Map<String, Query> ALL = new TreeMap<>();

  private Queries() {}

  static {
    ALL.put("q11", Q11::build);
    ALL.put("q12", Q12::build);
    ALL.put("q13", Q13::build);
    ALL.put("q14", Q14::build);
    ALL.put("q15", Q15::build);
    ALL.put("q16", Q16::build);
    ALL.put("q17", Q17::build);
    ALL.put("q18", Q18::build);
    ALL.put("q19", Q19::build);
    ALL.put("q20", Q20::build);
    ALL.put("q21", Q21::build);
    ALL.put("q22", Q22::build);
  }
}
