"""Maven poms for the JVM parts fluvial runs: the local Kafka broker and Spark's Kafka connector."""
