package bench

import "mvkv/vfs"

// engineDiskFS returns the engine's file system under model m, or nil (the
// engine's default, the real disk) for the zero model.
func engineDiskFS(m DiskModel) vfs.FS {
	if m.IsZero() {
		return nil
	}
	return vfs.WithDiskModel(vfs.OS{}, m.vfsModel())
}
