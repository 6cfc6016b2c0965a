// Package crilog writes container logs in the CRI log format that kubelet
// and crictl read, by following each container's log stream from Docker.
//
// kubelet reads a container's log at <sandbox log_directory>/<container
// log_path> and expects one entry per line:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <F|P> <text>\n
//
// F marks the end of a line the container wrote, P a chunk of a line that
// continues in the next entry of the same stream (a long line split in
// pieces, or a last line the container never terminated). kubelet rotates
// these files itself: it renames the file and calls ReopenContainerLog, after
// which the runtime must write to a fresh file at the original path.
//
// Docker keeps its own log of each container (json-file or local driver).
// Rather than pointing kubelet at that file, which is not in CRI format, a
// Follower asks Docker for the container's log stream (follow, with
// timestamps) and rewrites it, message by message, through a Writer into a
// real CRI log file. Because Docker keeps the log, a restarted netshim resumes
// each file where it stopped: it asks Docker for everything since the file's
// last timestamp and drops what the file already holds.
//
// The pieces, from the bottom up:
//
//   - Writer formats entries and appends them to the file (Reopen for
//     rotation);
//   - ParseLine reads an entry back, and LastTimestamp finds the newest one
//     by reading the file backwards;
//   - the decoders turn Docker's byte stream (multiplexed, or raw for TTY
//     containers) into timestamped messages;
//   - Follower ties these together for one container, Manager keeps one
//     Follower per container ID and restarts it, with back-off, while the
//     container may still write (a broken stream, a full disk).
//
// The log path comes from a pod spec, so files are opened confined (see
// NewWriter): no symlink is followed in any component, only a regular file
// is opened, and an existing file is written only if it holds CRI entries.
package crilog
