package sqlstore

import (
	"testing"
	"time"
)

// A time column reads the same in UTC whether the driver gives a DATETIME
// it parsed (MySQL, in any location) or INTEGER microseconds (SQLite).
func TestNullTimeScan(t *testing.T) {
	at := time.Date(2026, 12, 7, 17, 30, 0, 123456000, time.UTC)
	tests := []struct {
		name string
		src  any
		want nullTime
	}{
		{"NULL", nil, nullTime{}},
		{"DATETIME", at.In(time.FixedZone("UTC+8", 8*3600)), nullTime{at, true}},
		{"microseconds", at.UnixMicro(), nullTime{at, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nullTime{Time: time.Now(), Valid: true}
			if err := got.Scan(tt.src); err != nil {
				t.Fatalf("Scan(%v): %v", tt.src, err)
			}
			if got.Valid != tt.want.Valid || !got.Time.Equal(tt.want.Time) || got.Time.Location() != tt.want.Time.Location() {
				t.Errorf("Scan(%v) = %+v; want %+v", tt.src, got, tt.want)
			}
		})
	}
	var got nullTime
	if err := got.Scan("2026-12-07"); err == nil {
		t.Errorf("Scan of a string = %+v; want an error", got)
	}
}
