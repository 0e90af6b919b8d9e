package orderbatch

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReason(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("秒杀失败🙂é", 100) // 600 runes, 1, 2, 3 and 4 bytes each
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "stream: 16 deliveries failed", "stream: 16 deliveries failed"},
		{"exactly the limit", strings.Repeat("é", MaxReasonLen), strings.Repeat("é", MaxReasonLen)},
		{"one rune over", strings.Repeat("é", MaxReasonLen) + "x", strings.Repeat("é", MaxReasonLen)},
		{"multibyte, cut by runes", long, string([]rune(long)[:MaxReasonLen])},
		{"invalid UTF-8", "bad \xff\xfe byte", "bad \uFFFD byte"},
		{"NUL", "a\x00b", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Reason(tt.in)
			if got != tt.want {
				t.Errorf("Reason(%.40q…) = %.40q… (%d runes); want %.40q… (%d runes)",
					tt.in, got, utf8.RuneCountInString(got), tt.want, utf8.RuneCountInString(tt.want))
			}
			if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || utf8.RuneCountInString(got) > MaxReasonLen {
				t.Errorf("Reason(%.40q…) = %.40q…: not storable as it is", tt.in, got)
			}
		})
	}
}
