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
	loadVoucher *rueidis.Lua
	issueCode   *rueidis.Lua
	redeemCode  *rueidis.Lua
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
		loadVoucher: load("load_voucher"),
		issueCode:   load("issue_code"),
		redeemCode:  load("redeem_code"),
	}
}
