package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
)

// TestHelpSpellings: seckill help CMD, CMD --help and CMD -h print the same
// help, on stdout, exit 0, for every command.
func TestHelpSpellings(t *testing.T) {
	for _, name := range commandNames() {
		code, want, errOut := runCmd(environ{}, "help", name)
		if code != 0 || errOut != "" || !strings.HasPrefix(want, "seckill "+name+": ") {
			t.Errorf("help %s: exit %d, stderr %q, stdout:\n%s", name, code, errOut, want)
			continue
		}
		for _, flag := range []string{"--help", "-h"} {
			if code, out, errOut := runCmd(environ{}, name, flag); code != 0 || errOut != "" || out != want {
				t.Errorf("%s %s: exit %d, stderr %q; want help %s's:\n%s", name, flag, code, errOut, name, out)
			}
		}
	}
	if code, _, errOut := runCmd(environ{}, "help", "fly"); code != 2 || !strings.Contains(errOut, `unknown command "fly"`) {
		t.Errorf("help fly: exit %d, %q", code, errOut)
	}
}

// TestServeHelp: serve's help spells flags --flag, groups them under the
// headings of config.go, shows each default and variable, and an example.
func TestServeHelp(t *testing.T) {
	code, out, _ := runCmd(environ{}, "serve", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"Usage: seckill serve [flags]\n",
		"\nHTTP:\n  --addr string  (default \":8080\")  $SECKILL_ADDR\n",
		"\nRedis:\n", "\nDatabase:\n", "\nWorkers:\n", "\nLimits:\n", "\nPayments:\n", "\nLogin:\n",
		"\nChallenge:\n", "\nMetrics:\n", "\nLogging:\n",
		"  --migrate  (default true)  $SECKILL_MIGRATE\n",
		"\nExamples:\n  seckill serve\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out)
		}
	}
	// Every flag once, under its group; none in single-dash spelling.
	fs := lookupCommand("serve").flagSet()
	fs.visible(func(f *flag.Flag) {
		if n := strings.Count(out, "\n  --"+f.Name+" "); n != 1 {
			t.Errorf("--%s shown %d times", f.Name, n)
		}
	})
	if strings.Contains(out, "\nFlags:") {
		t.Errorf("a serve flag is outside the groups:\n%s", out)
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(out); m != "" {
		t.Errorf("a flag in single-dash spelling (%q):\n%s", m, out)
	}
}

func TestVersionFlag(t *testing.T) {
	code, out, _ := runCmd(environ{}, "--version")
	if code != 0 || !strings.HasPrefix(out, "seckill "+version+" (go") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	if code, same, _ := runCmd(environ{}, "version"); code != 0 || same != out {
		t.Errorf("version: exit %d, %q; want %q", code, same, out)
	}
}

// TestUsageErrorIsShort: a mistake on the command line is answered with
// its error and where help is, exit 2, and no usage dump.
func TestUsageErrorIsShort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--nope"}, "seckill serve: unknown flag --nope\n"},
		{[]string{"serve", "--workers", "many"}, "seckill serve: invalid value \"many\" for flag --workers: parse error\n"},
		{[]string{"serve", "--addr"}, "seckill serve: flag needs an argument: --addr\n"},
		{[]string{"token", "--admin=maybe"}, "seckill token: invalid boolean value \"maybe\" for --admin: parse error\n"},
		{[]string{"serve", "extra"}, "seckill serve: unexpected arguments: extra\n"},
		{[]string{"token"}, "seckill token: --user must be a positive user id\n"},
	} {
		code, out, errOut := runCmd(environ{}, tc.args...)
		want := tc.want + "run 'seckill " + tc.args[0] + " --help' for usage\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errOut, want)
		}
	}
	if code, _, errOut := runCmd(environ{}, "--nope"); code != 2 || strings.Count(errOut, "\n") != 2 {
		t.Errorf("--nope: exit %d, %q", code, errOut)
	}
}

// TestDeprecatedNames: the old names of renamed flags, and their
// variables, still work, each with one warning line.
func TestDeprecatedNames(t *testing.T) {
	tokens, err := auth.NewTokens([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  environ
		args []string
		warn string
	}{
		"flag":     {environ{"SECKILL_JWT_SECRET": testSecret}, []string{"--ttl", "1h"}, "seckill token: --ttl is deprecated: use --token-ttl\n"},
		"variable": {environ{"SECKILL_JWT_SECRET": testSecret, "SECKILL_TTL": "1h"}, nil, "seckill token: SECKILL_TTL is deprecated: use SECKILL_TOKEN_TTL\n"},
		"new name": {environ{"SECKILL_JWT_SECRET": testSecret, "SECKILL_TOKEN_TTL": "1h"}, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCmd(tc.env, append([]string{"token", "--user", "7"}, tc.args...)...)
			if code != 0 || errOut != tc.warn {
				t.Fatalf("exit %d, stderr %q; want 0 and %q", code, errOut, tc.warn)
			}
			tokens.Now = func() time.Time { return time.Now().Add(61 * time.Minute) }
			if _, err := tokens.Verify(strings.TrimSpace(out)); err == nil {
				t.Error("the token lasts past the hour its old-named lifetime gave it")
			}
		})
	}
	// The new name, given, wins over the old variable, without a warning.
	if code, _, errOut := runCmd(environ{"SECKILL_JWT_SECRET": testSecret, "SECKILL_TTL": "1h"}, "token", "--user", "7", "--token-ttl", "2h"); code != 0 || errOut != "" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	var buyers int
	fs := newFlagSet("demo")
	demoFlags(fs, &buyers, new(int64))
	var warn strings.Builder
	if err := parseFlags(fs, []string{"--buyers", "12"}, environ{}.get, &warn); err != nil || buyers != 12 || warn.String() != "seckill demo: --buyers is deprecated: use --users\n" {
		t.Errorf("demo --buyers 12: %v, %d buyers, %q", err, buyers, warn.String())
	}
	if code, out, _ := runCmd(environ{}, "help", "token"); code != 0 || !strings.Contains(out, "--ttl (SECKILL_TTL): use --token-ttl") || strings.Contains(out, "\n  --ttl duration") {
		t.Errorf("help token shows the old name as a flag, or not as deprecated:\n%s", out)
	}
}

// TestServerURL: the tools that talk to a server find it as serve's
// address says.
func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		":8080":                  "http://localhost:8080",
		"0.0.0.0:9000":           "http://localhost:9000",
		"[::]:9000":              "http://localhost:9000",
		"10.0.0.5:8080":          "http://10.0.0.5:8080",
		"localhost:8080":         "http://localhost:8080",
		"https://sale.example/":  "https://sale.example",
		"http://127.0.0.1:18080": "http://127.0.0.1:18080",
	} {
		if got := serverURL(in); got != want {
			t.Errorf("serverURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := defaultServer(environ{}.get); got != "http://localhost:8080" {
		t.Errorf("no SECKILL_ADDR: %q", got)
	}
	if got := defaultServer(environ{"SECKILL_ADDR": "127.0.0.1:9999"}.get); got != "http://127.0.0.1:9999" {
		t.Errorf("SECKILL_ADDR=127.0.0.1:9999: %q", got)
	}
	var a solveArgs
	fs := newFlagSet("solve")
	solveFlags(fs, &a)
	if err := parseFlags(fs, []string{"--url", ":9000,https://b.example"}, environ{}.get, &strings.Builder{}); err != nil || a.url != "http://localhost:9000,https://b.example" {
		t.Errorf("--url :9000,https://b.example = %q, %v", a.url, err)
	}
}

// TestSolveDefaultsToServeAddress: without --url, solve asks the server
// at SECKILL_ADDR, as serve listens there.
func TestSolveDefaultsToServeAddress(t *testing.T) {
	code, _, errOut := runCmd(environ{"SECKILL_ADDR": "127.0.0.1:1"}, "solve", "--voucher", "3", "--token", "x")
	if code != 1 || !strings.Contains(errOut, "http://127.0.0.1:1/api/vouchers/3/challenge") {
		t.Errorf("exit %d, %q; want it to ask 127.0.0.1:1", code, errOut)
	}
}

// TestBashCompletion runs the bash script as bash runs it for a Tab.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	code, script, _ := runCmd(environ{}, "completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "seckill.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		cmd := exec.CommandContext(context.Background(), bash, "--norc", "-c",
			`source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _seckill; printf '%s\n' "${COMPREPLY[@]}"`, "bash", file)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"seckill", "se"}, "serve"},
		{[]string{"seckill", "sm"}, "sms-sink"},
		{[]string{"seckill", "--v"}, "--version"},
		{[]string{"seckill", "serve", "--red"}, "--redis-prefix --redis-url --redis-wait-batches --redis-wait-pool --redis-wait-replicas --redis-wait-timeout"},
		{[]string{"seckill", "token", "--t"}, "--token-ttl"}, // not the deprecated --ttl
		{[]string{"seckill", "help", "dl"}, "dlq"},
		{[]string{"seckill", "completion", "f"}, "fish"},
		{[]string{"seckill", "dlq", "re"}, "retry"},
		{[]string{"seckill", "serve", "--redis-url", ""}, ""}, // a value: the shell's files
		{[]string{"seckill", "serve", "--migrate", "--lo"}, "--log-format --log-level --login-country-code --login-rate-addr --login-rate-addr-burst --login-rate-global --login-rate-global-burst --login-webhook-secret --login-webhook-timeout --login-webhook-url --login-wrong-addr --login-wrong-global"},
	} {
		if got := strings.Join(complete(tc.words...), " "); got != tc.want {
			t.Errorf("%q completes to %q, want %q", tc.words, got, tc.want)
		}
	}
	// Every command's every flag, from the same table as help.
	for _, c := range commands {
		c.flagSet().visible(func(f *flag.Flag) {
			if got := complete("seckill", c.name, "--"+f.Name); !contains(got, "--"+f.Name) {
				t.Errorf("seckill %s --%s completes to %q", c.name, f.Name, got)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestZshFishCompletion: the scripts name every command and flag, and
// parse where the shells are installed.
func TestZshFishCompletion(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		code, script, _ := runCmd(environ{}, "completion", shell)
		if code != 0 {
			t.Fatalf("completion %s: exit %d", shell, code)
		}
		for _, c := range commands {
			if !strings.Contains(script, c.name) {
				t.Errorf("the %s script lacks %s", shell, c.name)
			}
		}
		if !strings.Contains(script, "redis-wait-replicas") || strings.Contains(script, "'--ttl:") || strings.Contains(script, "-l ttl ") {
			t.Errorf("the %s script lacks a flag or offers a deprecated one", shell)
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s is not installed: its script is not parsed", shell)
			continue
		}
		cmd := exec.Command(path, "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
			continue
		}
		file := filepath.Join(t.TempDir(), "seckill-completion")
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		// zsh completes only inside its line editor: check that the
		// script loads and registers; fish completes a line on request.
		probe, want := `autoload -U compinit; compinit -u -d "$2"; source "$1"; print ${_comps[seckill]}`, "_seckill"
		if shell == "fish" {
			probe, want = `source $argv[1]; complete -C "seckill se"; complete -C "seckill serve --redis-u"; complete -C "seckill dlq r"`,
				"serve\trun the HTTP service\n--redis-url\tRedis URL\nretry"
		}
		cmd = exec.Command(path, "-c", probe, shell, file, file+".zcompdump")
		if shell == "fish" {
			cmd = exec.Command(path, "-c", probe, file)
		}
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s: %v; got %q, want %q", shell, err, out, want)
		}
	}
	if code, _, errOut := runCmd(environ{}, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, "unknown shell") {
		t.Errorf("completion tcsh: exit %d, %q", code, errOut)
	}
}
