package redis

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts are the embedded Lua scripts by name (the file name without
// .lua), each run by SHA with a fallback to EVAL on NOSCRIPT (rueidis.Lua
// does that), but the admission script: see Client.Admit.
type scripts map[string]script

// script is one embedded script: its source as Redis runs it, and its SHA.
type script struct {
	*rueidis.Lua
	src string
	sha string
}

// loadScripts reads the embedded scripts. The embedded server rejects the
// "#!lua" first line that real Redis needs to enforce declared keys, so for
// it the line is cut (docs/design.md, Lua scripts); the rest is the same code.
//
// The admission script ends with a comment naming the key prefix: its SHA
// is then the deployment's own, and a deployment that checks the server and
// arms admission (ArmAdmission) does not arm another one, sharing the
// server, that is still rebuilding its vouchers.
func loadScripts(embedded bool, prefix string) scripts {
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
		if name == "scripts/admit.lua" {
			src += "-- deployment " + strconv.Quote(prefix) + "\n"
		}
		sum := sha1.Sum([]byte(src))
		s[strings.TrimSuffix(path.Base(name), ".lua")] = script{Lua: rueidis.NewLuaScript(src), src: src, sha: hex.EncodeToString(sum[:])}
	}
	return s
}

// get returns the script of the name; a name without a file is a defect
// that every test of its caller catches.
func (s scripts) get(name string) script {
	l, ok := s[name]
	if !ok {
		panic("redis: no embedded script " + name + ".lua")
	}
	return l
}
