package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadmeWalkthrough runs the README's "Try it" lines as written, in
// bash, against a fresh serve on the embedded default, and checks every
// answer: no error where the README promises success, and what its
// comments promise. Only the server's address is replaced, since a test
// cannot own port 8080; `go run ./cmd/seckill` runs the built binary.
func TestReadmeWalkthrough(t *testing.T) {
	bin := seckillBinary(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the walk-through needs curl:", err)
	}
	cmds := readmeCommands(t)
	if len(cmds) == 0 || cmds[0].line != "go run ./cmd/seckill serve" {
		t.Fatalf("the walk-through does not start with serve: %q", cmds)
	}
	dir := t.TempDir()
	p := start(t, environ{}, "serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "seckill-data"))
	base := p.stdout.wait(t, `Listening on (http://\S+)`)[1]
	addr := strings.TrimPrefix(base, "http://")

	var script strings.Builder
	// go run ./cmd/seckill is the binary the test built.
	script.WriteString(`go() { if [[ $1 == run && $2 == ./cmd/seckill ]]; then shift 2; seckill "$@"; else command go "$@"; fi; }` + "\n")
	for i, c := range cmds[1:] {
		fmt.Fprintf(&script, "%s\nprintf '\\n@@@ %d %%d\\n' $?\n", strings.ReplaceAll(c.line, "localhost:8080", addr), i+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir = dir
	sh.Env = []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + dir, "SECKILL_ADDR=" + addr}
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}

	// Each command's output ends at its marker, with its exit status.
	outputs := map[int]string{}
	status := map[int]int{}
	rest := string(out)
	for i := 1; i < len(cmds); i++ {
		marker := regexp.MustCompile(`\n@@@ ` + strconv.Itoa(i) + ` (\d+)\n`)
		m := marker.FindStringSubmatchIndex(rest)
		if m == nil {
			t.Fatalf("no output of command %d (%s); all of it:\n%s", i, cmds[i].line, out)
		}
		outputs[i] = strings.TrimSpace(rest[:m[0]])
		status[i], _ = strconv.Atoi(rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}

	// What the comments promise beyond "no error", by a piece of the command.
	promised := map[string]string{
		"/api/vouchers/$V ":      `"stock":100,"remaining":100`,
		"/api/orders -H":         `"status":"`,
		"/pay ":                  `"status":"paid"`,
		"$ORDER/pay":             `"amount":1250,"currency":"CNY"`,
		`-H "X-Altcha: $ALTCHA"`: `"status":"pending"`,
		"/pause ":                `"paused":true`,
		"/resume ":               `"paused":false`,
		"restock-1":              `"stock":149`,
		"/end ":                  `"endTime"`,
		"seckill reconcile":      "Redis and the database agree",
		"seckill stats --url":    "from server " + base,
		"$NOBOTS/seckill -H \"Authorization: Bearer $BUYER\"   #": "challenge_required",
	}
	found := map[string]bool{}
	errorCode := regexp.MustCompile(`"code":"(\w+)"`)
	failed := regexp.MustCompile(`(?m)^seckill \S+: `) // a command's error
	for i := 1; i < len(cmds); i++ {
		c, got := cmds[i], outputs[i]
		if status[i] != 0 {
			t.Errorf("%s\nexit %d: %s", c.line, status[i], got)
		}
		if m := errorCode.FindStringSubmatch(got); m != nil && !strings.Contains(c.comment, m[1]) {
			t.Errorf("%s\nanswered %s, which its comment does not promise: %s", c.line, m[1], got)
		}
		if failed.MatchString(got) {
			t.Errorf("%s\nfailed: %s", c.line, got)
		}
		for piece, want := range promised {
			if !strings.Contains(c.line+" ", piece) {
				continue
			}
			found[piece] = true
			if !strings.Contains(got, want) {
				t.Errorf("%s\nanswered %s; want %s", c.line, got, want)
			}
		}
	}
	for piece := range promised {
		if !found[piece] {
			t.Errorf("no command of the walk-through has %q: update the test with the README", piece)
		}
	}
	if t.Failed() {
		t.Logf("the walk-through's output:\n%s", out)
	}
}

// readmeCommand is one command of the walk-through: its line (backslash
// continuations joined) and the comment after it.
type readmeCommand struct{ line, comment string }

// readmeCommands returns the commands of the first sh block of the
// README's "Try it" section.
func readmeCommands(t *testing.T) []readmeCommand {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Try it\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "\n```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md has no sh block under "## Try it"`)
	}
	var cmds []readmeCommand
	var cur string
	for _, l := range strings.Split(block, "\n") {
		if cur == "" && (strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#")) {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			cur += l + "\n"
			continue
		}
		cur += l
		c := readmeCommand{line: cur}
		// A comment starts at " # " outside quotes; the walk-through's
		// quoted JSON has none.
		if i := strings.LastIndex(cur, "  # "); i >= 0 {
			c.comment = cur[i+4:]
		} else if i := strings.LastIndex(cur, " # "); i >= 0 && !strings.Contains(cur[i:], "'") {
			c.comment = cur[i+3:]
		}
		cmds = append(cmds, c)
		cur = ""
	}
	return cmds
}
