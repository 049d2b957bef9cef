DROP TABLE refusal_counts;
