package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/migrate"
	"github.com/seckill/seckill/internal/testenv"
)

// An order written before migration 0007 (its row then had none of the
// lifecycle's columns), migrated, reads as created with nothing of the
// lifecycle set, and still holds its buyer's slot: the migration gave it
// slot 1. It has no written_at, so its PayBy counts from its creation, and
// no sweep takes it.
func TestOrderMadeBeforeLifecycle(t *testing.T) {
	s, err := Open(t.Context(), testenv.PostgresURL(t), 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	ms, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	err = s.with(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, createMigrationsTableSQL); err != nil {
				return err
			}
			for _, m := range ms[:6] {
				for _, stmt := range m.Statements {
					if _, err := tx.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(ctx, insertVersionSQL, m.Version, m.Name, now()); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("migrate to 0006: %v", err)
	}
	v := &seckill.Voucher{Title: "v", Stock: 9, InitialStock: 10, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	// Inserted as the schema of 0006 has it: CreateVoucher writes the
	// columns of later migrations.
	err = s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel)
VALUES ($1, $2, $3, $4, $5, $6, 0, 1, '', 60, false) RETURNING id`, v.Title, v.Stock, v.InitialStock, utc(v.BeginTime), utc(v.EndTime), now()).Scan(&v.ID)
	})
	if err != nil {
		t.Fatal(err)
	}
	created := now()
	err = s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO orders (id, user_id, voucher_id, status, created_at) VALUES (7, 1, $1, 'created', $2)`, v.ID, created)
		return err
	})
	if err != nil {
		t.Fatalf("insert an order as before 0007: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0006: %v", err)
	}

	want := &seckill.Order{ID: 7, UserID: 1, VoucherID: v.ID, Status: seckill.OrderCreated, CreatedAt: created, PayBy: created.Add(time.Minute)}
	got, err := s.Order(ctx, 7)
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("Order(7): %v (-want +got):\n%s", err, diff)
	}
	outcomes, err := s.SaveOrders(ctx, []*seckill.Order{{ID: 8, UserID: 1, VoucherID: v.ID}})
	if err != nil || outcomes[0] != seckill.BuyerConflict {
		t.Errorf("SaveOrders of another order of the buyer = %v, %v; want %v", outcomes, err, seckill.BuyerConflict)
	}
	// It has no written_at: a sweep never takes it.
	if due, err := s.CancelDue(ctx, v.ID, now().Add(time.Hour), now().Add(time.Hour), now(), 10); err != nil || len(due) != 0 {
		t.Errorf("CancelDue of an order from before 0007 = %v, %v; want none", due, err)
	}
	if o, err := s.CancelOrder(ctx, 7, seckill.ReasonBuyerCancelled, now()); err != nil || o.Status != seckill.OrderCancelled {
		t.Errorf("CancelOrder(7) = %+v, %v; want it cancelled", o, err)
	}
}

// A sweep skips a due order another transaction holds (a buyer's cancel
// or payment in flight, another sweep), instead of waiting for it, and
// takes the others; the next sweep takes it.
func TestCancelDueSkipsLocked(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	v := &seckill.Voucher{Title: "v", Stock: 3, InitialStock: 3, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	if err := s.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	created := now().Add(-time.Hour)
	os := []*seckill.Order{
		{ID: 1, UserID: 1, VoucherID: v.ID, CreatedAt: created},
		{ID: 2, UserID: 2, VoucherID: v.ID, CreatedAt: created.Add(time.Second)},
		{ID: 3, UserID: 3, VoucherID: v.ID, CreatedAt: created.Add(2 * time.Second)},
	}
	if _, err := s.SaveOrders(ctx, os); err != nil {
		t.Fatal(err)
	}
	locked := make(chan struct{})
	release := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.with(ctx, func(conn *pgx.Conn) error {
			return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SELECT id FROM orders WHERE id = 1 FOR UPDATE`); err != nil {
					return err
				}
				close(locked)
				<-release
				return nil
			})
		})
	}()
	select {
	case <-locked:
	case err := <-held:
		t.Fatalf("lock order 1: %v", err)
	}

	// Waiting for the lock would take until the lock is released.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	due, err := s.CancelDue(wctx, v.ID, now(), now(), now(), 10)
	close(release)
	if err != nil {
		t.Fatalf("CancelDue with order 1 locked: %v", err)
	}
	if len(due) != 2 || due[0].ID != 2 || due[1].ID != 3 {
		t.Errorf("CancelDue with order 1 locked took %d orders; want 2 and 3", len(due))
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	due, err = s.CancelDue(ctx, v.ID, now(), now(), now(), 10)
	if err != nil || len(due) != 1 || due[0].ID != 1 {
		t.Errorf("CancelDue once order 1 is free = %v, %v; want order 1", due, err)
	}
}
