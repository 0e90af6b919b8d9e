package sqlite

import (
	"time"

	"github.com/seckill/seckill/sqlstore"
)

// now is a time as the store keeps it, for rows the tests write.
func now() time.Time { return sqlstore.UTC(time.Now()) }
