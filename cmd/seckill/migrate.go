package main

import (
	"context"
	"fmt"
	"io"
)

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c Config
	fs := newFlagSet("migrate")
	migrateFlags(fs, &c)
	if err := parseFlags(fs, args, getenv, stderr); err != nil {
		return err
	}
	logger, err := c.newLogger(stderr, c.DBURL == "")
	if err != nil {
		return err
	}
	store, err := openStore(ctx, &c, logger)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	where := redact(c.DBURL)
	if c.DBURL == "" {
		where = sqlitePath(&c) + " (embedded default)"
	}
	fmt.Fprintf(stdout, "database %s is up to date\n", where)
	return nil
}

func migrateFlags(fs *flagSet, c *Config) {
	fs.group("Database", c.dbFlags)
	fs.group("Logging", c.logFlags)
}
