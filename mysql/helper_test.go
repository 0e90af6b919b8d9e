package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/seckill/seckill/sqlstore"
)

// now is a time as the store keeps it, for rows the tests write.
func now() time.Time { return utc(time.Now()) }

// commit is the store's commit (sqlstore.Commit), which the tests check on
// MariaDB.
func commit(ctx context.Context, tx *sql.Tx) error { return sqlstore.Commit(ctx, tx) }
