// Package wal is mvkv's write-ahead log: placeholder doc, replaced below.
package wal
