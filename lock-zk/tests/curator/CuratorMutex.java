// Interop helper for the lock-zk tests: drives Apache Curator's InterProcessMutex
// so a Java client and a Rust client can contend on the same ZooKeeper lock path.
//
// Usage: java -cp CP CuratorMutex <connectString> <lockPath> <mode> [args...]
//   contend <iterations> <markerFile>  loop acquire/critical section/release, appending "J" to
//                                      <markerFile>.log in each critical section;
//                                      prints "DONE acquisitions=<n> overlaps=<m>"
//   hold                               acquire, print "HELD <node>" and "CHILDREN <a,b,..>",
//                                      release after one line (or EOF) on stdin, print "RELEASED"
//   wait <timeoutSeconds>              print "WAITING", then "ACQUIRED" + "RELEASED" or "TIMEOUT"
//
// Exit codes: 0 success, 1 unexpected exception, 2 usage error, 3 could not connect.
// Every stdout line is flushed immediately because the test reads it as a pipe.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorMutex {

    /** Exposes the protected path of the node we hold, which the test compares with Rust's view. */
    private static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String ownNode() {
            return getLockPath();
        }
    }

    private static final String USAGE =
            "usage: CuratorMutex <connectString> <lockPath> (contend <iterations> <markerFile> | hold | wait <timeoutSeconds>)";

    public static void main(String[] args) {
        System.exit(run(args));
    }

    private static int run(String[] args) {
        if (args.length < 3) {
            return usage();
        }
        String connect = args[0];
        String lockPath = args[1];
        String mode = args[2];

        // Validate arguments before connecting so a bad invocation fails fast with exit 2.
        int iterations = 0;
        Path marker = null;
        long timeoutSeconds = 0;
        try {
            switch (mode) {
                case "contend":
                    if (args.length != 5) {
                        return usage();
                    }
                    iterations = Integer.parseInt(args[3]);
                    marker = Path.of(args[4]);
                    break;
                case "hold":
                    if (args.length != 3) {
                        return usage();
                    }
                    break;
                case "wait":
                    if (args.length != 4) {
                        return usage();
                    }
                    timeoutSeconds = Long.parseLong(args[3]);
                    break;
                default:
                    return usage();
            }
        } catch (NumberFormatException e) {
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
            Mutex mutex = new Mutex(client, lockPath);
            switch (mode) {
                case "contend":
                    contend(mutex, iterations, marker);
                    break;
                case "hold":
                    hold(client, mutex, lockPath);
                    break;
                default:
                    waitFor(mutex, timeoutSeconds);
                    break;
            }
            return 0;
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        } finally {
            client.close();
        }
    }

    // The marker file is shared by every contender (Java or Rust): creating it atomically
    // detects a second holder inside the critical section without trusting either lock client.
    private static void contend(Mutex mutex, int iterations, Path marker) throws Exception {
        int acquisitions = 0;
        int overlaps = 0;
        Path log = Path.of(marker + ".log");
        for (int i = 0; i < iterations; i++) {
            mutex.acquire();
            try {
                acquisitions++;
                boolean created = false;
                try {
                    Files.createFile(marker);
                    created = true;
                } catch (FileAlreadyExistsException e) {
                    overlaps++;
                }
                // Who held the lock, in order: the test checks that both sides took turns.
                Files.writeString(log, "J\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                // Widen the window so a broken lock actually shows up as an overlap.
                Thread.sleep(1);
                // Never delete someone else's marker: that would hide their overlap.
                if (created) {
                    Files.delete(marker);
                }
            } finally {
                mutex.release();
            }
        }
        out("DONE acquisitions=" + acquisitions + " overlaps=" + overlaps);
    }

    private static void hold(CuratorFramework client, Mutex mutex, String lockPath) throws Exception {
        mutex.acquire();
        try {
            out("HELD " + mutex.ownNode());
            List<String> children = new ArrayList<>(client.getChildren().forPath(lockPath));
            Collections.sort(children);
            out("CHILDREN " + String.join(",", children));
            // Hold until the test says so; EOF (test died) also releases.
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        } finally {
            mutex.release();
        }
        out("RELEASED");
    }

    private static void waitFor(Mutex mutex, long timeoutSeconds) throws Exception {
        out("WAITING");
        if (mutex.acquire(timeoutSeconds, TimeUnit.SECONDS)) {
            out("ACQUIRED");
            mutex.release();
            out("RELEASED");
        } else {
            out("TIMEOUT");
        }
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
