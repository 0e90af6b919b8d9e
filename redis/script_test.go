package redis

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScriptsDeclareKeys checks every embedded script against the rules of
// docs/design/redis.md, Lua scripts: each key it touches comes from KEYS (so the script runs on
// Redis Cluster), it starts with #!lua, and it opens with its contract.
func TestScriptsDeclareKeys(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(scriptFiles, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(sources) {
		t.Fatalf("found %d embedded scripts %v, want the %d that have handles", len(names), names, len(sources))
	}
	for _, name := range names {
		src, err := scriptFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		problems, calls := lintScript(name, string(src))
		for _, p := range problems {
			t.Error(p)
		}
		// Guard the lint itself: it must have looked at every call.
		if want := strings.Count(string(src), "redis.call") + strings.Count(string(src), "redis.pcall"); calls != want {
			t.Errorf("%s: the lint checked %d calls, the script makes %d", name, calls, want)
		}
	}

	// The lint must be able to fail: each bad script below is reported.
	const header = "#!lua\n-- bad: a test.\n--\n-- KEYS[1] a key\n-- ARGV[1] a value\n--\n-- Returns nothing.\n"
	tests := []struct {
		name, src string
		want      []string
	}{
		{"good", header + "local t = redis.call('TIME')\nredis.call('SET', KEYS[1], ARGV[1])\n" +
			"local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], 'g', '0')\nredis.call('DEL', KEYS[1])\n" +
			"-- redis.call('GET', 'in a comment')\nlocal s = \"redis.call('GET', 'in a string')\"\n", nil},
		{"built key", header + "return redis.call('GET', 'seckill:' .. ARGV[1])\n",
			[]string{"built key:8: GET: argument 1 ('seckill:' .. ARGV[1]) is not KEYS[n]"}},
		{"variable key", header + "local k = KEYS[1]\nreturn redis.call('HGET', k, 'x')\n",
			[]string{"variable key:9: HGET: argument 1 (k) is not KEYS[n]"}},
		{"pcall", header + "return redis.pcall('HGET', ARGV[1], 'x')\n",
			[]string{"pcall:8: HGET: argument 1 (ARGV[1]) is not KEYS[n]"}},
		{"pcall of redis.call", header + "local ok = pcall(redis.call, 'XGROUP', 'CREATE', 'orders', 'g', '0')\n",
			[]string{"pcall of redis.call:8: XGROUP: argument 2 ('orders') is not KEYS[n]"}},
		{"xinfo subcommand", header + "redis.call('XINFO', 'GROUPS', KEYS[1] .. 'x')\n",
			[]string{"xinfo subcommand:8: XINFO: argument 2 (KEYS[1] .. 'x') is not KEYS[n]"}},
		{"second key", header + "redis.call('DEL', KEYS[1], 'other')\n",
			[]string{"second key:8: DEL: argument 2 ('other') is not KEYS[n]"}},
		{"no key", header + "redis.call('GET')\n",
			[]string{"no key:8: GET: argument 1 is missing"}},
		{"computed command", header + "local cmd = 'GET'\nredis.call(cmd, KEYS[1])\n",
			[]string{"computed command:9: command (cmd) is not a string literal"}},
		{"indirect call", header + "local call = redis.call\ncall('GET', 'x')\n",
			[]string{"indirect call:8: redis.call used other than as redis.call(...) or pcall(redis.call, ...)"}},
		{"unknown key layout", header + "redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', KEYS[1], '>')\n",
			[]string{"unknown key layout:8: XREADGROUP: the lint does not know where its keys are; teach keyArgs"}},
		{"undocumented key", header + "redis.call('GET', KEYS[2])\n",
			[]string{"undocumented key: KEYS[2] is used but the header does not describe it"}},
		{"no shebang", strings.TrimPrefix(header, "#!lua\n") + "redis.call('GET', KEYS[1])\n",
			[]string{"no shebang: first line is \"-- bad: a test.\", want #!lua"}},
		{"no contract", "#!lua\n-- bad: a test.\nredis.call('GET', KEYS[1])\n",
			[]string{
				"no contract: header comment does not say KEYS",
				"no contract: header comment does not say ARGV",
				"no contract: header comment does not say Returns",
				"no contract: KEYS[1] is used but the header does not describe it",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := lintScript(tt.name, tt.src)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lintScript (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScriptHandles: every embedded script has exactly one handle and
// every handle a script; a handle of no file, or a second handle of one,
// fails when the package loads.
func TestScriptHandles(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(scriptFiles, "scripts/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, n := range names {
		files = append(files, strings.TrimSuffix(path.Base(n), ".lua"))
	}
	if diff := cmp.Diff(files, slices.Sorted(maps.Keys(sources))); diff != "" {
		t.Errorf("embedded scripts (-files +handles):\n%s", diff)
	}
	for name, s := range sources {
		if s.name != name {
			t.Errorf("sources[%q] is the handle of %q", name, s.name)
		}
		if !strings.HasPrefix(s.redis.src, "#!lua") || strings.HasPrefix(s.embedded.src, "#!") ||
			!strings.HasSuffix(s.redis.src, s.embedded.src) {
			t.Errorf("%s: want the file for Redis, and it without its #!lua line for the embedded server", name)
		}
	}
	for _, name := range []string{"no_such_script", "admit"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("newScript(%q) did not panic", name)
				}
			}()
			newScript[args](name)
		}()
	}
	if len(files) != len(sources) {
		t.Errorf("a refused handle was recorded: %d handles for %d files", len(sources), len(files))
	}
}

// TestAdmitScriptIsTheDeployments: each deployment (key prefix) runs an
// admission script of its own SHA, for Redis and the embedded server alike.
func TestAdmitScriptIsTheDeployments(t *testing.T) {
	t.Parallel()
	for _, embedded := range []bool{false, true} {
		a, b := admitScript.deployment("a", embedded), admitScript.deployment("b", embedded)
		if a.sha == b.sha || a.sha == admitScript.on(embedded).sha {
			t.Errorf("embedded %v: the SHAs of two deployments' admission scripts, %s and %s, are not their own", embedded, a.sha, b.sha)
		}
		if !strings.HasPrefix(a.src, admitScript.on(embedded).src) || !strings.HasSuffix(a.src, "-- deployment \"a\"\n") {
			t.Errorf("embedded %v: deployment \"a\"'s admission script ends %q", embedded, a.src[max(0, len(a.src)-40):])
		}
	}
}

// TestScriptArgs: the ARGV each args struct makes are as many as its
// script's header names, its list (ARGV[n..]) aside, and each in the
// header's place.
func TestScriptArgs(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1700000000000)
	tests := []struct {
		script string
		argv   []string
		want   map[int]string // ARGV index -> value
	}{
		{"admit", admitArgs{UserID: 7, OrderID: 1001, VoucherID: "3", Append: true, Generation: 2}.argv(),
			map[int]string{1: "7", 2: "1001", 3: "3", 4: "1", 5: "2", 6: "0"}},
		{"claim_stale", claimStaleArgs{Consumer: "c", MinIdle: time.Second, Cursor: "0-0", Count: 5, Scan: 50}.argv(),
			map[int]string{1: Group, 2: "c", 3: "1000", 4: "0-0", 5: "5", 6: "50"}},
		{"dead_letter", deadLetterArgs{EntryID: "1-0", OrderID: 1001, VoucherID: 3, Reason: "r", GiveStock: true}.argv(),
			map[int]string{1: Group, 2: "1-0", 3: "1001", 4: "", 5: "3", 6: "r", 7: "1", 8: "", 9: holdMillis, 10: changeLogLen, 11: changeLogTTL}},
		{"finish_rebuild", finishRebuildArgs{Generation: "2", Epoch: "9", InitialStock: 100, Begin: at, End: at.Add(time.Second), Paused: true}.argv(),
			map[int]string{1: "2", 2: "9", 3: "100", 4: "1700000000000", 5: "1700000001000", 6: Group, 7: "1"}},
		{"load_voucher", loadVoucherArgs{Stock: 100, Begin: at, End: at.Add(time.Second), Generation: 2}.argv(),
			map[int]string{1: "100", 2: "1700000000000", 3: "1700000001000", 4: Group, 5: "2", 6: "", 7: ""}},
		{"load_voucher", loadVoucherArgs{Stock: 100, Begin: at, End: at.Add(time.Second), Generation: 2, Shards: 6, Index: 5}.argv(),
			map[int]string{1: "100", 2: "1700000000000", 3: "1700000001000", 4: Group, 5: "2", 6: "6", 7: "5"}},
		{"node_acquire", nodeAcquireArgs{Token: "tk", TTL: time.Second, First: 7, Count: 1024}.argv(),
			map[int]string{1: "tk", 2: "1000", 3: "7", 4: "1024", 5: ""}},
		{"node_renew", nodeRenewArgs{Node: 7, Token: "tk", TTL: time.Second, LastUnixMs: 5, Recent: true}.argv(),
			map[int]string{1: "7", 2: "tk", 3: "1000", 4: "5", 5: "1"}},
		{"transfer_give", transferGiveArgs{ID: "t1", N: 5, Generation: "2", XGen: "0", Cancel: true}.argv(),
			map[int]string{1: "t1", 2: "5", 3: "2", 4: "0", 5: "cancel", 6: holdMillis}},
		{"transfer_take", transferTakeArgs{ID: "t1", To: 3, N: 5, Generation: "2", XGen: "0"}.argv(),
			map[int]string{1: "t1", 2: "3", 3: "5", 4: "2", 5: "0"}},
		{"release", releaseArgs{UserID: 7, OrderID: 1001, Keep: "1002"}.argv(),
			map[int]string{1: "7", 2: "1001", 3: "1002", 4: holdMillis, 5: changeLogLen, 6: changeLogTTL}},
		{"return_unit", returnUnitArgs{UserID: 7, OrderID: 1001, Rebuy: true, Generation: 2}.argv(),
			map[int]string{1: "7", 2: "1001", 3: "1", 4: "2", 5: holdMillis, 6: changeLogLen, 7: changeLogTTL}},
	}
	argvLine := regexp.MustCompile(`(?m)^-- ARGV\[(\d+)\]`)
	for _, tt := range tests {
		src := sources[tt.script].redis.src
		n := 0
		for _, m := range argvLine.FindAllStringSubmatch(src, -1) {
			i, _ := strconv.Atoi(m[1])
			n = max(n, i)
		}
		if n <= 4 || len(tt.argv) != n {
			t.Errorf("%s: %d ARGV made, the header names %d (want more than four)", tt.script, len(tt.argv), n)
			continue
		}
		for i, want := range tt.want {
			if got := tt.argv[i-1]; got != want {
				t.Errorf("%s: ARGV[%d] = %q, want %q", tt.script, i, got, want)
			}
		}
		if len(tt.want) != n {
			t.Errorf("%s: the test checks %d ARGV of %d", tt.script, len(tt.want), n)
		}
	}
	live := claimStaleArgs{Live: []string{"a", "b"}}.argv()
	if !slices.Equal(live[6:], []string{"a", "b"}) {
		t.Errorf("claim_stale: ARGV[7..] = %q, want the live consumers", live[6:])
	}
}

// keyArgs returns the positions (1 = the argument after the command) of the
// arguments of cmd that are keys, given n arguments after the command;
// ok is false for a command whose keys the lint cannot place.
func keyArgs(cmd string, n int) (pos []int, ok bool) {
	switch cmd {
	case "TIME", "PING", "ECHO", "INFO":
		return nil, true
	case "XGROUP", "XINFO", "OBJECT", "MEMORY":
		return []int{2}, true // after the subcommand
	case "DEL", "UNLINK", "EXISTS", "MGET", "TOUCH", "WATCH",
		"SINTER", "SUNION", "SDIFF", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "PFCOUNT", "PFMERGE":
		for i := 1; i <= max(n, 1); i++ {
			pos = append(pos, i)
		}
		return pos, true
	case "RENAME", "RENAMENX", "SMOVE", "LMOVE", "RPOPLPUSH", "COPY":
		return []int{1, 2}, true
	case "XREAD", "XREADGROUP", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO",
		"MSET", "MSETNX", "SORT", "SORT_RO", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZUNION", "ZINTER",
		"ZDIFF", "BITOP", "LMPOP", "ZMPOP", "BLMPOP", "BZMPOP", "GEORADIUS", "GEORADIUSBYMEMBER",
		"KEYS", "SCAN", "RANDOMKEY", "FLUSHALL", "FLUSHDB", "MIGRATE":
		return nil, false
	}
	return []int{1}, true
}

// lintScript reports where the script src breaks the rules of
// docs/design/redis.md, Lua scripts, and how many calls to Redis it checked. Problems name the
// script, and the line where there is one.
func lintScript(name, src string) (problems []string, calls int) {
	report := func(line int, format string, args ...any) {
		if line > 0 {
			problems = append(problems, fmt.Sprintf("%s:%d: ", name, line)+fmt.Sprintf(format, args...))
		} else {
			problems = append(problems, name+": "+fmt.Sprintf(format, args...))
		}
	}

	lines := strings.Split(src, "\n")
	if first := strings.TrimRight(lines[0], " \r"); first != "#!lua" && !strings.HasPrefix(first, "#!lua ") {
		report(0, "first line is %q, want #!lua", first)
	}
	var header strings.Builder
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "--") {
			break
		}
		header.WriteString(l + "\n")
	}
	for _, word := range []string{"KEYS", "ARGV", "Returns"} {
		if !strings.Contains(header.String(), word) {
			report(0, "header comment does not say %s", word)
		}
	}

	toks := lexLua(src)
	used := map[string]bool{}
	is := func(i int, kind byte, text string) bool {
		return i >= 0 && i < len(toks) && toks[i].kind == kind && toks[i].text == text
	}
	isCall := func(i int) bool { // redis . call|pcall
		return is(i, 'n', "redis") && is(i+1, 'p', ".") && (is(i+2, 'n', "call") || is(i+2, 'n', "pcall"))
	}
	for i := range toks {
		if !isCall(i) {
			continue
		}
		var args [][]luaToken
		switch {
		case is(i+3, 'p', "("):
			args = splitArgs(toks[i+4:])
		case is(i-2, 'n', "pcall") && !is(i-3, 'p', ".") && is(i-1, 'p', "(") && is(i+3, 'p', ","):
			args = splitArgs(toks[i+4:])
		default:
			report(toks[i].line, "redis.%s used other than as redis.%[1]s(...) or pcall(redis.%[1]s, ...)", toks[i+2].text)
			continue
		}
		calls++
		line := toks[i].line
		if len(args) == 0 {
			report(line, "call with no command")
			continue
		}
		if len(args[0]) != 1 || args[0][0].kind != 's' {
			report(line, "command (%s) is not a string literal", argText(src, args[0]))
			continue
		}
		cmd := strings.ToUpper(args[0][0].text)
		pos, ok := keyArgs(cmd, len(args)-1)
		if !ok {
			report(line, "%s: the lint does not know where its keys are; teach keyArgs", cmd)
			continue
		}
		for _, p := range pos {
			if p >= len(args) {
				report(line, "%s: argument %d is missing", cmd, p)
				continue
			}
			a := args[p]
			if len(a) == 4 && a[0].kind == 'n' && a[0].text == "KEYS" && a[1].text == "[" && a[2].kind == '#' &&
				digits.MatchString(a[2].text) && a[3].text == "]" {
				used["KEYS["+a[2].text+"]"] = true
				continue
			}
			report(line, "%s: argument %d (%s) is not KEYS[n]", cmd, p, argText(src, a))
		}
	}
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !strings.Contains(header.String(), k) {
			report(0, "%s is used but the header does not describe it", k)
		}
	}
	return problems, calls
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// luaToken is a token of Lua source: kind 'n' a name, 's' a string (text
// is its content), '#' a number, 'p' punctuation.
type luaToken struct {
	kind       byte
	text       string
	line       int
	start, end int // byte offsets in the source
}

// argText returns the source text of an argument's tokens.
func argText(src string, a []luaToken) string {
	if len(a) == 0 {
		return ""
	}
	return src[a[0].start:a[len(a)-1].end]
}

// splitArgs splits the tokens after a call's "(" into its arguments, up to
// the matching ")".
func splitArgs(toks []luaToken) [][]luaToken {
	var args [][]luaToken
	var cur []luaToken
	depth := 0
	for _, tk := range toks {
		if tk.kind == 'p' {
			switch tk.text {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					if len(cur) > 0 || len(args) > 0 {
						args = append(args, cur)
					}
					return args
				}
				depth--
			case ",":
				if depth == 0 {
					args = append(args, cur)
					cur = nil
					continue
				}
			}
		}
		cur = append(cur, tk)
	}
	return append(args, cur) // unbalanced: what there is
}

// lexLua splits Lua source into tokens, dropping comments and a first
// "#!" line.
func lexLua(src string) []luaToken {
	var toks []luaToken
	line := 1
	i := 0
	if strings.HasPrefix(src, "#!") {
		i = strings.IndexByte(src, '\n')
		if i < 0 {
			return nil
		}
	}
	// longBracket returns the level of a long bracket "[==[" at j, or -1.
	longBracket := func(j int) int {
		if j >= len(src) || src[j] != '[' {
			return -1
		}
		k := j + 1
		for k < len(src) && src[k] == '=' {
			k++
		}
		if k < len(src) && src[k] == '[' {
			return k - j - 1
		}
		return -1
	}
	// skipLong returns the offset after the long bracket of level lvl
	// opened at j.
	skipLong := func(j, lvl int) int {
		closing := "]" + strings.Repeat("=", lvl) + "]"
		k := strings.Index(src[j+lvl+2:], closing)
		if k < 0 {
			return len(src)
		}
		return j + lvl + 2 + k + len(closing)
	}
	for i < len(src) {
		ch := src[i]
		start := i
		switch {
		case ch == '\n':
			line++
			i++
		case ch == ' ' || ch == '\t' || ch == '\r':
			i++
		case strings.HasPrefix(src[i:], "--"):
			if lvl := longBracket(i + 2); lvl >= 0 {
				i = skipLong(i+2, lvl)
			} else if j := strings.IndexByte(src[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(src)
			}
			line += strings.Count(src[start:i], "\n")
		case ch == '\'' || ch == '"':
			j := i + 1
			for j < len(src) && src[j] != ch && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(src))
			toks = append(toks, luaToken{kind: 's', text: src[i+1 : min(j, len(src))], line: line, start: i, end: end})
			i = end
		case longBracket(i) >= 0:
			lvl := longBracket(i)
			i = skipLong(i, lvl)
			toks = append(toks, luaToken{kind: 's', text: src[start+lvl+2 : max(start+lvl+2, i-lvl-2)], line: line, start: start, end: i})
			line += strings.Count(src[start:i], "\n")
		case ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			for i < len(src) && (src[i] == '_' || src[i] >= 'a' && src[i] <= 'z' || src[i] >= 'A' && src[i] <= 'Z' || src[i] >= '0' && src[i] <= '9') {
				i++
			}
			toks = append(toks, luaToken{kind: 'n', text: src[start:i], line: line, start: start, end: i})
		case ch >= '0' && ch <= '9':
			for i < len(src) && (src[i] == '.' || src[i] == '_' || src[i] >= '0' && src[i] <= '9' || src[i] >= 'a' && src[i] <= 'z' || src[i] >= 'A' && src[i] <= 'Z') {
				i++
			}
			toks = append(toks, luaToken{kind: '#', text: src[start:i], line: line, start: start, end: i})
		default:
			n := 1
			for _, op := range []string{"...", "..", "==", "~=", "<=", ">=", "::", "//"} {
				if strings.HasPrefix(src[i:], op) {
					n = len(op)
					break
				}
			}
			i += n
			toks = append(toks, luaToken{kind: 'p', text: src[start:i], line: line, start: start, end: i})
		}
	}
	return toks
}
