package testenv

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Logger returns a logger that writes each record to the test's log, so
// that a failing test shows what the service logged and a passing one
// stays quiet (go test shows t.Log only on failure or with -v).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(t), nil))
}

// LogWriter writes each write to the test's log as one line, for tests
// that build a handler of their own (another level, a second writer).
func LogWriter(t testing.TB) io.Writer { return logWriter{t} }

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
