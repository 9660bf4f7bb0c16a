package migrate

import (
	"context"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// lockproxyLock answers LOCKPROXY LOCK key (args) from the inner backend,
// and for a key only the legacy Redis holds (taken there by a client not
// yet moved) from the legacy Redis: its value and TTL as LOCKPROXY LOCK
// gives them, no fence (fences are the inner backend's), and a holder map
// whose field legacy names the legacy Redis's address, its client fields
// empty (the legacy Redis does not record who set a key, nor when). A
// legacy Redis that fails answers TRYAGAIN, never "free".
func (b *Backend) lockproxyLock(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	v, err := b.inner.Do(ctx, db, keys, args)
	if err != nil || !v.IsNil() || len(args) != 3 || !strings.EqualFold(string(args[1]), "lock") {
		return v, err
	}
	lctx, cancel := b.legacyCtx(ctx)
	defer cancel()
	snap, err := snapshotScript.Run(lctx, b.client(db), keys).Result()
	if err != nil {
		return backend.Value{}, b.failed(err)
	}
	view := &model.View{Now: time.Now().UnixMilli(), Spaces: []*model.Space{{}}}
	if live, known := loadSnapshot(ctx, view, db, keys, snap); !live || !known {
		return backend.NilValue, nil
	}
	lv, err := view.Do(ctx, db, keys, args)
	if err != nil || lv.Kind != backend.KindArray || len(lv.Elems) != 4 {
		return backend.NilValue, err
	}
	lv.Elems[1] = backend.NilValue // the sandbox's fence is no grant's
	h := &lv.Elems[3]
	h.Elems = append(h.Elems, backend.BulkString("legacy"), backend.BulkString(b.legacy.Addr))
	return lv, nil
}
