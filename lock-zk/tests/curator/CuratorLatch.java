// Interop helper for the lock-zk tests (LE05): drives Apache Curator's LeaderLatch so a Java
// participant and Rust candidates can share one election path.
//
// Usage: java -cp CP CuratorLatch <connectString> <latchPath> <mode> [args...]
//   latch <id>                          start a LeaderLatch with participant id <id>, print
//                                       "STARTED", then answer one command per stdin line:
//                                         path          "PATH <our node>"
//                                         status        "STATUS leader=<hasLeadership> leaderId=<getLeader().getId()>"
//                                         await <secs>  "LEADER" or "TIMEOUT"
//                                         close         close the latch, print "CLOSED" and exit
//                                       (EOF closes too)
//   cycle <terms> <markerFile> <id>     <terms> times: start a latch, await leadership, enter the
//                                       critical section shared with the test (create <markerFile>
//                                       atomically, append "J" to <markerFile>.log), check that
//                                       getLeader().getId() is <id>, close; prints
//                                       "DONE terms=<n> overlaps=<m> mismatches=<k>"
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
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLatch {

    private static final String USAGE =
            "usage: CuratorLatch <connectString> <latchPath> (latch <id> | cycle <terms> <markerFile> <id>)";

    public static void main(String[] args) {
        System.exit(run(args));
    }

    private static int run(String[] args) {
        if (args.length < 4) {
            return usage();
        }
        String connect = args[0];
        String latchPath = args[1];
        String mode = args[2];

        // Validate arguments before connecting so a bad invocation fails fast with exit 2.
        int terms = 0;
        Path marker = null;
        String id;
        try {
            switch (mode) {
                case "latch":
                    if (args.length != 4) {
                        return usage();
                    }
                    id = args[3];
                    break;
                case "cycle":
                    if (args.length != 6) {
                        return usage();
                    }
                    terms = Integer.parseInt(args[3]);
                    marker = Path.of(args[4]);
                    id = args[5];
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
            if (mode.equals("latch")) {
                latch(client, latchPath, id);
            } else {
                cycle(client, latchPath, terms, marker, id);
            }
            return 0;
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        } finally {
            client.close();
        }
    }

    private static void latch(CuratorFramework client, String latchPath, String id) throws Exception {
        LeaderLatch latch = new LeaderLatch(client, latchPath, id);
        latch.start();
        out("STARTED");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                String[] command = line.trim().split(" ");
                switch (command[0]) {
                    case "path":
                        // The node is created in the background after start().
                        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                        while (latch.getOurPath() == null && System.nanoTime() < until) {
                            Thread.sleep(10);
                        }
                        out("PATH " + latch.getOurPath());
                        break;
                    case "status":
                        out("STATUS leader=" + latch.hasLeadership() + " leaderId=" + latch.getLeader().getId());
                        break;
                    case "await":
                        boolean leader = latch.await(Long.parseLong(command[1]), TimeUnit.SECONDS);
                        out(leader ? "LEADER" : "TIMEOUT");
                        break;
                    case "close":
                        latch.close();
                        out("CLOSED");
                        return;
                    default:
                        out("UNKNOWN " + line);
                        break;
                }
            }
        } finally {
            if (latch.getState() == LeaderLatch.State.STARTED) {
                latch.close();
            }
        }
    }

    // The marker file is shared with every distlock candidate: creating it atomically detects a
    // second leader inside the critical section without trusting either client.
    private static void cycle(CuratorFramework client, String latchPath, int terms, Path marker, String id)
            throws Exception {
        int overlaps = 0;
        int mismatches = 0;
        Path log = Path.of(marker + ".log");
        for (int i = 0; i < terms; i++) {
            LeaderLatch latch = new LeaderLatch(client, latchPath, id);
            latch.start();
            try {
                latch.await();
                boolean created = false;
                try {
                    Files.createFile(marker);
                    created = true;
                } catch (FileAlreadyExistsException e) {
                    overlaps++;
                }
                // Who led, in order: the test checks that both sides took turns.
                Files.writeString(log, "J\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                // The leader as the servers have it is this participant.
                if (!latch.getLeader().getId().equals(id)) {
                    mismatches++;
                }
                // Never delete someone else's marker: that would hide their overlap.
                if (created) {
                    Files.delete(marker);
                }
            } finally {
                latch.close();
            }
        }
        out("DONE terms=" + terms + " overlaps=" + overlaps + " mismatches=" + mismatches);
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
