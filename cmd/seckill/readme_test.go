package main

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

// TestConfigDocListsEveryFlag keeps the configuration table of
// docs/configuration.md true: every flag of serve and migrate is there, with
// its variable and default.
func TestConfigDocListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `--") {
			name := strings.TrimPrefix(strings.SplitN(line, "`", 3)[1], "--")
			rows[name] = line
		}
	}
	for _, cmd := range []string{"serve", "migrate"} {
		fs := lookupCommand(cmd).flagSet()
		fs.visible(func(f *flag.Flag) {
			row, ok := rows[f.Name]
			if !ok {
				t.Errorf("docs/configuration.md has no row for --%s", f.Name)
				return
			}
			if !strings.Contains(row, "`"+envName(f.Name)+"`") {
				t.Errorf("docs/configuration.md row of --%s lacks `%s`: %s", f.Name, envName(f.Name), row)
			}
			cells := strings.Split(row, "|")
			def := strings.Trim(strings.TrimSpace(cells[3]), "`")
			if d, err := time.ParseDuration(f.DefValue); err == nil {
				if rd, err := time.ParseDuration(def); err != nil || rd != d {
					t.Errorf("docs/configuration.md gives --%s the default %q, want %v", f.Name, def, d)
				}
			} else if def != f.DefValue {
				t.Errorf("docs/configuration.md gives --%s the default %q, want %q", f.Name, def, f.DefValue)
			}
		})
	}
}
