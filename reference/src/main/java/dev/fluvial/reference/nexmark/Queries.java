package dev.fluvial.reference.nexmark;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.streams.StreamsBuilder;

/** The Nexmark queries by name (fluvial.bench.nexmark.queries.QUERIES). */
public final class Queries {
  private Queries() {}

  /** Adds a query to a builder: its input topics by kind (person, auction, bid), its output. */
  @FunctionalInterface
  public interface Query {
    void build(StreamsBuilder builder, Map<String, String> topics, String output);
  }

  public static final Map<String, Query> ALL = new LinkedHashMap<>();

  static {
    ALL.put("q0", Q0::build);
    ALL.put("q1", Q1::build);
    ALL.put("q2", Q2::build);
    ALL.put("q3", Q3::build);
    ALL.put("q4", Q4::build);
    ALL.put("q5", Q5::build);
    ALL.put("q6", Q6::build);
    ALL.put("q7", Q7::build);
    ALL.put("q8", Q8::build);
    ALL.put("q9", Q9::build);
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
