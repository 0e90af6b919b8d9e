package redis

import (
	"embed"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the Lua scripts, each run by SHA with a fallback to EVAL on
// NOSCRIPT (rueidis.Lua does that).
type scripts struct {
	loadVoucher   *rueidis.Lua
	issueCode     *rueidis.Lua
	redeemCode    *rueidis.Lua
	admit         *rueidis.Lua
	deadLetter    *rueidis.Lua
	stageBuyers   *rueidis.Lua
	finishRebuild *rueidis.Lua
	reapConsumer  *rueidis.Lua
	countPersist  *rueidis.Lua
	release       *rueidis.Lua
	nodeAcquire   *rueidis.Lua
	nodeRenew     *rueidis.Lua
	nodeRelease   *rueidis.Lua
}

// loadScripts reads the embedded scripts. The embedded server rejects the
// "#!lua" first line that real Redis needs to enforce declared keys, so for
// it the line is cut (DESIGN section 4a); the rest is the same code.
func loadScripts(embedded bool) scripts {
	load := func(name string) *rueidis.Lua {
		b, err := scriptFiles.ReadFile("scripts/" + name + ".lua")
		if err != nil {
			panic("redis: missing embedded script " + name) // a build defect, caught by every test
		}
		src := string(b)
		if embedded && strings.HasPrefix(src, "#!") {
			_, src, _ = strings.Cut(src, "\n")
		}
		return rueidis.NewLuaScript(src)
	}
	return scripts{
		loadVoucher:   load("load_voucher"),
		issueCode:     load("issue_code"),
		redeemCode:    load("redeem_code"),
		admit:         load("admit"),
		deadLetter:    load("dead_letter"),
		stageBuyers:   load("stage_buyers"),
		finishRebuild: load("finish_rebuild"),
		reapConsumer:  load("reap_consumer"),
		countPersist:  load("count_persisted"),
		release:       load("release"),
		nodeAcquire:   load("node_acquire"),
		nodeRenew:     load("node_renew"),
		nodeRelease:   load("node_release"),
	}
}
