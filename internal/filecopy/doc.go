// Package filecopy copies a file from one vfs.FS to another and fsyncs
// the copy, for the online backup: the WAL copies its segments with it,
// and the engine its control and index files.
//
// The copy is made with ReadAt and WriteAt through one caller-given
// buffer, so that a backup of thousands of segments allocates one buffer,
// and it can end the copy's data early and fill the rest with zeros: a
// WAL segment copied while the writer appends to it is cut at the log's
// end, as the bytes past it may be a record in progress.
//
// Rejected: io.Copy over the files, which cannot cut or zero-fill, and
// a copy per package (the WAL's and the engine's were one loop twice).
package filecopy
