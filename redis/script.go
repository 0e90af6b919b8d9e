package redis

import (
	"embed"
	"io/fs"
	"path"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the embedded Lua scripts by name (the file name without
// .lua), each run by SHA with a fallback to EVAL on NOSCRIPT (rueidis.Lua
// does that).
type scripts map[string]*rueidis.Lua

// loadScripts reads the embedded scripts. The embedded server rejects the
// "#!lua" first line that real Redis needs to enforce declared keys, so for
// it the line is cut (DESIGN section 4a); the rest is the same code.
func loadScripts(embedded bool) scripts {
	names, err := fs.Glob(scriptFiles, "scripts/*.lua")
	if err != nil {
		panic("redis: list embedded scripts: " + err.Error()) // a build defect, caught by every test
	}
	s := make(scripts, len(names))
	for _, name := range names {
		b, err := scriptFiles.ReadFile(name)
		if err != nil {
			panic("redis: read embedded script " + name + ": " + err.Error())
		}
		src := string(b)
		if embedded && strings.HasPrefix(src, "#!") {
			_, src, _ = strings.Cut(src, "\n")
		}
		s[strings.TrimSuffix(path.Base(name), ".lua")] = rueidis.NewLuaScript(src)
	}
	return s
}

// get returns the script of the name; a name without a file is a defect
// that every test of its caller catches.
func (s scripts) get(name string) *rueidis.Lua {
	l, ok := s[name]
	if !ok {
		panic("redis: no embedded script " + name + ".lua")
	}
	return l
}
