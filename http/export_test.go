package http

// Exported for the tests of package http_test: those run the service as
// internal/app builds it, and internal/app imports this package, so they
// cannot be in it.

// MetricIn returns the value of series in a /metrics text, or fails t.
var MetricIn = metricIn
