// Package seckill is the domain of a flash-sale order service: vouchers with
// a limited stock and a sale window, the buyers who log in to buy them, and
// the orders they place.
//
// The root package holds the types, the errors every layer shares and the
// small interfaces the adapters implement: a relational [Store] (package
// mysql, postgres or sqlite), the [Ledger] that decides who may take a
// unit (package redisledger, or sqlledger: the database itself),
// [LoginCodes] kept in Redis (package redis), and a [CodeSender] that
// delivers login codes. Services in
// this package ([VoucherService]) hold the rules that do not depend on any
// one adapter. The service is wired in one place, package
// internal/app, which the commands in cmd/seckill run.
package seckill
