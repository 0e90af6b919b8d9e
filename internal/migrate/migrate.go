// Package migrate loads the numbered SQL migrations that each store embeds
// and splits them into statements. Applying them is left to each store,
// because the bookkeeping table, the lock that keeps concurrent processes
// apart and the transaction rules differ per database.
package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered migration file, NNNN_name.sql.
type Migration struct {
	// Version is the file's number; versions start at 1 and have no gaps.
	Version int
	// Name is the part of the file name between the number and ".sql".
	Name string
	// Statements are the file's SQL statements, without their final ';'.
	Statements []string
}

// ErrInvalid marks a migration set that cannot be applied as it is: a bad
// file name, a duplicate or missing version, a statement without its ';'.
var ErrInvalid = errors.New("invalid migration")

// fileName is NNNN_name.sql: four digits or more, so that versions sort as
// text too, and a lowercase name.
var fileName = regexp.MustCompile(`^([0-9]{4,})_([a-z0-9][a-z0-9_]*)\.sql$`)

// Load reads every .sql file in dir of fsys and returns the migrations in
// version order. It fails on a file whose name is not NNNN_name.sql, on two
// files with one version, on a gap in the versions (which start at 1), on a
// file without statements and on a set without files, so that a mistake in
// the embedded files shows on the first start instead of in a half-migrated
// database. Files not ending in .sql and subdirectories are ignored.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("%w: file %s: name must be NNNN_name.sql", ErrInvalid, e.Name())
		}
		version, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("%w: file %s: version: %w", ErrInvalid, e.Name(), err)
		}
		text, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		stmts, err := Split(string(text))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		if len(stmts) == 0 {
			return nil, fmt.Errorf("%w: file %s has no statements", ErrInvalid, e.Name())
		}
		ms = append(ms, Migration{Version: version, Name: m[2], Statements: stmts})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: no NNNN_name.sql files in %s", ErrInvalid, dir)
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		switch want := i + 1; {
		case m.Version == want:
		case i > 0 && m.Version == ms[i-1].Version:
			return nil, fmt.Errorf("%w: version %d is used by %s and %s", ErrInvalid, m.Version, ms[i-1].Name, m.Name)
		default:
			return nil, fmt.Errorf("%w: version %d is missing (next is %d, %s)", ErrInvalid, want, m.Version, m.Name)
		}
	}
	return ms, nil
}

// Split cuts a migration file into statements. A statement ends with a ';'
// that is the last character of its line, so a ';' inside a line (in a
// string or a comment) does not end it; lines that hold only a "--" comment
// are dropped. Text after the last statement other than blanks and comments
// is an error: it is a statement whose ';' was forgotten.
func Split(text string) ([]string, error) {
	var (
		stmts []string
		cur   strings.Builder
	)
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(strings.TrimRight(line, " \t\r\n"))
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSpace(strings.TrimSuffix(cur.String(), ";"))
			cur.Reset()
			if stmt == "" {
				return nil, fmt.Errorf("%w: empty statement (a ';' alone)", ErrInvalid)
			}
			stmts = append(stmts, stmt)
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		return nil, fmt.Errorf("%w: statement without a final ';': %.60q", ErrInvalid, rest)
	}
	return stmts, nil
}
