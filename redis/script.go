package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// The embedded Lua scripts, one handle each, made when the package loads: a
// handle whose file is missing stops the program before it runs. Each is
// run through its handle's run or runInt, by SHA with a fallback to EVAL on
// NOSCRIPT (rueidis.Lua does that), but the admission script: see
// Client.Admit. The type parameter is the script's ARGV: args for a script
// that takes four or fewer, or a list; a named struct for one that takes
// more, turned into ARGV in the order its header states.
var (
	admitScript          = newScript[admitArgs]("admit")
	claimStaleScript     = newScript[claimStaleArgs]("claim_stale")
	controlScript        = newScript[args]("control")
	copyChangesScript    = newScript[args]("copy_changes")
	countPersistedScript = newScript[args]("count_persisted")
	deadLetterScript     = newScript[deadLetterArgs]("dead_letter")
	dropVoucherScript    = newScript[args]("drop_voucher")
	fenceRenewScript     = newScript[args]("fence_renew")
	fenceSetScript       = newScript[args]("fence_set")
	finishRebuildScript  = newScript[finishRebuildArgs]("finish_rebuild")
	giveUpScript         = newScript[args]("give_up")
	issueCodeScript      = newScript[args]("issue_code")
	loadVoucherScript    = newScript[loadVoucherArgs]("load_voucher")
	nodeAcquireScript    = newScript[nodeAcquireArgs]("node_acquire")
	nodeReleaseScript    = newScript[args]("node_release")
	nodeRenewScript      = newScript[nodeRenewArgs]("node_renew")
	reapConsumerScript   = newScript[args]("reap_consumer")
	rebuildBeginScript   = newScript[args]("rebuild_begin")
	redeemCodeScript     = newScript[args]("redeem_code")
	refundGuessScript    = newScript[args]("refund_guess")
	releaseScript        = newScript[releaseArgs]("release")
	returnUnitScript     = newScript[returnUnitArgs]("return_unit")
	spendGuessScript     = newScript[args]("spend_guess")
	stageBuyersScript    = newScript[args]("stage_buyers")
	stageQueuedScript    = newScript[args]("stage_queued")
	trimOrdersScript     = newScript[args]("trim_orders")
	unloadScript         = newScript[args]("unload")
	withdrawCodeScript   = newScript[args]("withdraw_code")
)

// argv is what a script takes as ARGV.
type argv interface{ argv() []string }

// args are the ARGV of a script that takes four or fewer, or a list, in
// the order its header states.
type args []string

func (a args) argv() []string { return a }

// script is the handle of one embedded script whose ARGV are A.
type script[A argv] struct{ *source }

// source is an embedded script's text, as each kind of server runs it.
type source struct {
	name string // the file name without .lua
	// redis is the file as Redis runs it; embedded the same without its
	// "#!lua" first line, which the embedded server rejects (real Redis
	// needs it to enforce declared keys: docs/design/redis.md, Lua scripts).
	redis, embedded loaded
}

// loaded is a script's source as one server runs it, and its SHA.
type loaded struct {
	*rueidis.Lua
	src string
	sha string
}

func newLoaded(src string) loaded {
	sum := sha1.Sum([]byte(src))
	return loaded{Lua: rueidis.NewLuaScript(src), src: src, sha: hex.EncodeToString(sum[:])}
}

// sources are the handles' sources by name: one handle per file.
var sources = map[string]*source{}

// newScript returns the handle of scripts/name.lua. A name without a file,
// or with a handle already, is a defect: it panics when the package loads.
func newScript[A argv](name string) script[A] {
	b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redis: embedded script " + name + ": " + err.Error())
	}
	if sources[name] != nil {
		panic("redis: two handles of the embedded script " + name)
	}
	src := string(b)
	_, bare, _ := strings.Cut(src, "\n")
	if !strings.HasPrefix(src, "#!") {
		bare = src
	}
	s := &source{name: name, redis: newLoaded(src), embedded: newLoaded(bare)}
	sources[name] = s
	return script[A]{s}
}

// on returns the script as the server runs it: the embedded one, or Redis.
func (s *source) on(embedded bool) loaded {
	if embedded {
		return s.embedded
	}
	return s.redis
}

// run runs the script on c's server with keys and a, and returns its
// answer.
func (s script[A]) run(ctx context.Context, c *Client, keys []string, a A) rueidis.RedisResult {
	return s.on(c.embedded).Exec(ctx, c.rdb, keys, a.argv())
}

// runInt runs the script and returns its answer, an integer (most
// scripts answer a code, as asynq's runScriptWithErrorCode has it); a
// failure is wrapped by redisErr with op.
func (s script[A]) runInt(ctx context.Context, c *Client, op string, keys []string, a A) (int64, error) {
	n, err := s.run(ctx, c, keys, a).AsInt64()
	if err != nil {
		return 0, redisErr(op, err)
	}
	return n, nil
}

// deployment returns the admission script of the deployment under prefix,
// as the server runs it. It ends with a comment naming the prefix: its SHA
// is then the deployment's own, and a deployment that checks the server
// and arms admission (ArmAdmission) does not arm another one, sharing the
// server, that is still rebuilding its vouchers.
func (s script[A]) deployment(prefix string, embedded bool) loaded {
	l := newLoaded(s.on(embedded).src + "-- deployment " + strconv.Quote(prefix) + "\n")
	l.Lua = nil // run by Client.admitOnce, by SHA alone
	return l
}
