//! The metrics backend is in memory already: tests use the real store and
//! read it back through its rendering.

pub type FakeMetrics = super::real::SeriesStore;
