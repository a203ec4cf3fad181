package dev.gatun.cuda.testing;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.core.LauncherFactory;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;
import static org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder.request;

/**
 * The check that, without a GPU, a {@link RequiresGpu} test class reports each of its tests as skipped with the
 * probe's reason, rather than aborting the class so that nothing is reported (the "Tests run: 0, Skipped: 0" of an
 * assumption in {@code @BeforeAll}). Used by the CUDA library's tests and the CUDA backend's.
 */
public final class GpuSkips {
    private GpuSkips() {}

    /** Runs {@code cls} through the JUnit launcher and checks that every test of it was skipped, naming the reason. */
    public static void assertEachTestSkippedWithTheReason(Class<?> cls) {
        String name = cls.getName();
        var skipped = new LinkedHashMap<String, String>();
        var notSuccessful = new ArrayList<String>();
        LauncherFactory.create().execute(request().selectors(selectClass(cls)).build(), new TestExecutionListener() {
            @Override public void executionSkipped(TestIdentifier id, String reason) { skipped.put(id.getDisplayName(), reason); }

            @Override public void executionFinished(TestIdentifier id, TestExecutionResult result) {
                if (result.getStatus() != TestExecutionResult.Status.SUCCESSFUL) notSuccessful.add(id.getDisplayName() + ": " + result);
            }
        });
        assertThat(notSuccessful).as(name + ": nothing aborted").isEmpty();
        assertThat(skipped.keySet()).as(name).containsExactlyInAnyOrderElementsOf(testMethods(cls));
        assertThat(skipped.values()).as(name).allSatisfy(reason -> assertThat(reason).startsWith("no CUDA: unavailable: "));
    }

    /** Display names of the class's tests: name(ParamType, ...). */
    private static List<String> testMethods(Class<?> cls) {
        var out = new ArrayList<String>();
        for (Method m : cls.getDeclaredMethods()) {
            if (!m.isAnnotationPresent(Test.class) && !m.isAnnotationPresent(ParameterizedTest.class)) continue;
            out.add(m.getName() + "(" + String.join(", ", Arrays.stream(m.getParameterTypes()).map(Class::getSimpleName).toList()) + ")");
        }
        return out;
    }
}
