package http

import (
	"log/slog"
	"sync"
	"time"
)

// logSampler keeps failure logs readable at peak rates: per kind of
// failure it lets a few lines a second through and counts the rest, which
// the next line that passes reports. Outcomes of single admissions are not
// logged at all: at 50,000 a second that would be the whole log.
type logSampler struct {
	perSecond int
	now       func() time.Time

	mu    sync.Mutex
	kinds map[string]*sampled
}

type sampled struct {
	second     time.Time
	n          int
	suppressed int
}

func newLogSampler(perSecond int) *logSampler {
	return &logSampler{perSecond: perSecond, now: time.Now, kinds: map[string]*sampled{}}
}

// allow reports whether a line of kind may be logged now, and how many of
// its kind were suppressed since the last that was.
func (l *logSampler) allow(kind string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.kinds[kind]
	if s == nil {
		if len(l.kinds) > 1000 { // kinds come from routes and statuses: few
			clear(l.kinds)
		}
		s = &sampled{}
		l.kinds[kind] = s
	}
	if sec := l.now().Truncate(time.Second); !sec.Equal(s.second) {
		s.second, s.n = sec, 0
	}
	if s.n >= l.perSecond {
		s.suppressed++
		return false, 0
	}
	s.n++
	suppressed, s.suppressed = s.suppressed, 0
	return true, suppressed
}

// log writes a sampled error line.
func (l *logSampler) log(logger *slog.Logger, kind, msg string, args ...any) {
	ok, suppressed := l.allow(kind)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	logger.Error(msg, args...)
}
