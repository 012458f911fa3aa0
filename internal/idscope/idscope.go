// Package idscope holds the format of a message key scoped by its type
// (inbox.Config.ScopeIDByType), so that the root package, which stores
// such keys, and the command, which replays them, agree on it.
package idscope

import "encoding/binary"

// Key is the key of (typ, id) scoped by type: typ's length as a uvarint,
// typ's bytes and id's, which no other (type, ID) pair shares.
func Key(typ, id string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(typ)+len(id)), uint64(len(typ)))
	return append(append(b, typ...), id...)
}

// Split splits a key that Key made; ok is false for a key that is not
// one (its length prefix is missing or longer than the rest).
func Split(key []byte) (typ, id string, ok bool) {
	n, k := binary.Uvarint(key)
	if k <= 0 || n > uint64(len(key)-k) {
		return "", "", false
	}
	return string(key[k : k+int(n)]), string(key[k+int(n):]), true
}
