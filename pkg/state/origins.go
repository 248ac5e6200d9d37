package state

import "github.com/cespare/xxhash/v2"

// origins interns the node ids that wrote the entries, so that an entry names its
// origin by a small number instead of holding a string (a pointer per entry). Ids are
// reference-counted and reused: pods come and go with every deploy, and each new pod
// is a new origin. Owned by the table's lock.
type origins struct {
	ids    map[string]uint32
	names  []string
	hashes []uint64 // xxhash64 of each name, for the digest
	refs   []int
	free   []uint32
}

func newOrigins() origins { return origins{ids: make(map[string]uint32)} }

// ref returns the id of name and counts one more entry using it.
func (o *origins) ref(name string) uint32 {
	id, ok := o.ids[name]
	if !ok {
		if n := len(o.free); n > 0 {
			id = o.free[n-1]
			o.free = o.free[:n-1]
			o.names[id], o.refs[id], o.hashes[id] = name, 0, xxhash.Sum64String(name)
		} else {
			id = uint32(len(o.names))
			o.names, o.refs = append(o.names, name), append(o.refs, 0)
			o.hashes = append(o.hashes, xxhash.Sum64String(name))
		}
		o.ids[name] = id
	}
	o.refs[id]++
	return id
}

// unref counts one entry fewer using id, and forgets the name when none is left.
func (o *origins) unref(id uint32) {
	if o.refs[id]--; o.refs[id] == 0 {
		delete(o.ids, o.names[id])
		o.names[id] = ""
		o.free = append(o.free, id)
	}
}

func (o *origins) name(id uint32) string { return o.names[id] }

func (o *origins) hash(id uint32) uint64 { return o.hashes[id] }
