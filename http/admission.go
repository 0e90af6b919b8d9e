package http

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// admissions counts admissions by result. (Stub: being built.)
type admissions struct{}

func newAdmissions(reg prometheus.Registerer) (*admissions, error) { return &admissions{}, nil }

// record counts one admission's result and latency.
func (a *admissions) record(result string, d time.Duration) {}
