// Interop helper for the lock-zk tests (Z04, Z05): drives Apache Curator's
// InterProcessReadWriteLock and InterProcessSemaphoreV2 so that Java and Rust clients share
// one read-write lock path or one semaphore path.
//
// Usage: java -cp CP CuratorShared <connectString> <path> <mode> [args...]
//   rw-hold <read|write>                 acquire, print "HELD <node>", release after one line
//                                        (or EOF) on stdin, print "RELEASED"
//   rw-try <read|write> <timeoutMs>      print "ACQUIRED" then "RELEASED", or "TIMEOUT"
//   rw-contend <iterations> <dir>        loop: every third a write, else a read; inside, leave a
//                                        file in <dir> and look at the others' (a writer must be
//                                        alone, a reader must see no writer's file); appends
//                                        "J" to <dir>.log per hold; prints
//                                        "DONE acquisitions=<n> overlaps=<m>"
//   sem-hold <permits> <count>           take <count> leases, print "HELD <count>", return them
//                                        after one line (or EOF) on stdin, print "RELEASED"
//   sem-try <permits> <timeoutMs>        print "ACQUIRED" then "RELEASED", or "TIMEOUT"
//   sem-contend <permits> <threads> <iterations> <dir>
//                                        each thread loops: take a lease, leave a file in <dir>
//                                        and count the files (more than <permits> is an
//                                        overlap), return it; prints
//                                        "DONE acquisitions=<n> overlaps=<m>"
//
// Exit codes: 0 success, 1 unexpected exception, 2 usage error, 3 could not connect.
// Every stdout line is flushed immediately because the test reads it as a pipe.

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorShared {

    private static final String USAGE =
            "usage: CuratorShared <connectString> <path> (rw-hold <read|write> | rw-try <read|write> <timeoutMs>"
                    + " | rw-contend <iterations> <dir> | sem-hold <permits> <count> | sem-try <permits> <timeoutMs>"
                    + " | sem-contend <permits> <threads> <iterations> <dir>)";

    public static void main(String[] args) {
        System.exit(run(args));
    }

    private static int run(String[] args) {
        if (args.length < 3) {
            return usage();
        }
        String connect = args[0];
        String path = args[1];
        String mode = args[2];
        int expected;
        switch (mode) {
            case "rw-hold":
                expected = 4;
                break;
            case "rw-try":
            case "rw-contend":
            case "sem-hold":
            case "sem-try":
                expected = 5;
                break;
            case "sem-contend":
                expected = 7;
                break;
            default:
                return usage();
        }
        if (args.length != expected) {
            return usage();
        }
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, 10_000, 5_000, new ExponentialBackoffRetry(100, 3));
        try {
            client.start();
            if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
                System.err.println("could not connect to ZooKeeper at " + connect + " within 20s");
                return 3;
            }
            switch (mode) {
                case "rw-hold":
                    rwHold(client, path, args[3]);
                    break;
                case "rw-try":
                    rwTry(client, path, args[3], Long.parseLong(args[4]));
                    break;
                case "rw-contend":
                    rwContend(client, path, Integer.parseInt(args[3]), Path.of(args[4]));
                    break;
                case "sem-hold":
                    semHold(client, path, Integer.parseInt(args[3]), Integer.parseInt(args[4]));
                    break;
                case "sem-try":
                    semTry(client, path, Integer.parseInt(args[3]), Long.parseLong(args[4]));
                    break;
                default:
                    semContend(client, path, Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                            Integer.parseInt(args[5]), Path.of(args[6]));
                    break;
            }
            return 0;
        } catch (NumberFormatException e) {
            return usage();
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        } finally {
            client.close();
        }
    }

    private static InterProcessMutex side(CuratorFramework client, String path, String access) {
        InterProcessReadWriteLock lock = new InterProcessReadWriteLock(client, path);
        switch (access) {
            case "read":
                return lock.readLock();
            case "write":
                return lock.writeLock();
            default:
                throw new NumberFormatException("read or write, not " + access);
        }
    }

    private static void rwHold(CuratorFramework client, String path, String access) throws Exception {
        InterProcessMutex mutex = side(client, path, access);
        mutex.acquire();
        try {
            // The holder's node: the only child of the path with this client's session.
            long session = client.getZookeeperClient().getZooKeeper().getSessionId();
            String ours = null;
            for (String child : client.getChildren().forPath(path)) {
                if (client.checkExists().forPath(path + "/" + child).getEphemeralOwner() == session) {
                    ours = path + "/" + child;
                }
            }
            out("HELD " + ours);
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        } finally {
            mutex.release();
        }
        out("RELEASED");
    }

    private static void rwTry(CuratorFramework client, String path, String access, long timeoutMs)
            throws Exception {
        InterProcessMutex mutex = side(client, path, access);
        if (mutex.acquire(timeoutMs, TimeUnit.MILLISECONDS)) {
            out("ACQUIRED");
            mutex.release();
            out("RELEASED");
        } else {
            out("TIMEOUT");
        }
    }

    // Each holder leaves a file named after its mode in the shared directory and looks at the
    // others' (Rust's holders do the same): a writer must be alone, a reader must see no writer.
    private static void rwContend(CuratorFramework client, String path, int iterations, Path dir)
            throws Exception {
        InterProcessReadWriteLock lock = new InterProcessReadWriteLock(client, path);
        Path log = Path.of(dir + ".log");
        int acquisitions = 0;
        int overlaps = 0;
        for (int i = 0; i < iterations; i++) {
            boolean write = i % 3 == 0;
            InterProcessMutex mutex = write ? lock.writeLock() : lock.readLock();
            mutex.acquire();
            try {
                acquisitions++;
                Path mine = dir.resolve((write ? "w-" : "r-") + UUID.randomUUID());
                Files.createFile(mine);
                for (String other : names(dir)) {
                    if (!other.equals(mine.getFileName().toString()) && (write || other.startsWith("w-"))) {
                        overlaps++;
                        break;
                    }
                }
                Files.writeString(log, write ? "JW\n" : "JR\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                Thread.sleep(1);
                Files.delete(mine);
            } finally {
                mutex.release();
            }
        }
        out("DONE acquisitions=" + acquisitions + " overlaps=" + overlaps);
    }

    private static void semHold(CuratorFramework client, String path, int permits, int count) throws Exception {
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
        Collection<Lease> leases = semaphore.acquire(count);
        try {
            out("HELD " + leases.size());
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        } finally {
            semaphore.returnAll(leases);
        }
        out("RELEASED");
    }

    private static void semTry(CuratorFramework client, String path, int permits, long timeoutMs) throws Exception {
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
        Lease lease = semaphore.acquire(timeoutMs, TimeUnit.MILLISECONDS);
        if (lease != null) {
            out("ACQUIRED");
            semaphore.returnLease(lease);
            out("RELEASED");
        } else {
            out("TIMEOUT");
        }
    }

    private static void semContend(CuratorFramework client, String path, int permits, int threads,
            int iterations, Path dir) throws Exception {
        AtomicInteger acquisitions = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        List<Thread> workers = new ArrayList<>();
        List<Exception> failures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            // One semaphore per thread, as separate clients would have: each instance removes
            // its own watchers after an acquisition.
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
            Thread worker = new Thread(() -> {
                try {
                    for (int i = 0; i < iterations; i++) {
                        Lease lease = semaphore.acquire();
                        try {
                            acquisitions.incrementAndGet();
                            Path mine = dir.resolve("j-" + UUID.randomUUID());
                            Files.createFile(mine);
                            if (names(dir).size() > permits) {
                                overlaps.incrementAndGet();
                            }
                            Thread.sleep(2);
                            Files.delete(mine);
                        } finally {
                            semaphore.returnLease(lease);
                        }
                    }
                } catch (Exception e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) {
            worker.join();
        }
        if (!failures.isEmpty()) {
            throw failures.get(0);
        }
        out("DONE acquisitions=" + acquisitions.get() + " overlaps=" + overlaps.get());
    }

    private static List<String> names(Path dir) {
        String[] names = new File(dir.toString()).list();
        return names == null ? List.of() : List.of(names);
    }

    private static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static int usage() {
        System.err.println(USAGE);
        return 2;
    }
}
