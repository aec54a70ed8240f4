"""Models for tests and benchmarks, built with `lowtide.model.builder.ModelBuilder` (the zoo, apart from the
builder's API)."""
