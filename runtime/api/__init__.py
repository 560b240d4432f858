"""The DataStream API: what a job is written with (environment, streams, functions, windows, state
descriptors, sources and sinks)."""
