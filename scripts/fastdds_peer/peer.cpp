// A second DDS vendor for roborl's interoperability test: an eProsima Fast DDS participant
// that speaks ROS 2's conventions (topics "rt/<name>", types pkg::msg::dds_::Type_, reliable /
// keep-last 10 / volatile) and echoes what it receives, transformed so the test can tell the
// peer really decoded it:
//   rt/fastdds_peer/joint_states_in  -> rt/fastdds_peer/joint_states_out
//       (positions + 1, frame_id prefixed with "fastdds:", everything else unchanged)
//   rt/fastdds_peer/commands_in      -> rt/fastdds_peer/commands_out   (data * 2)
// Usage: fastdds_echo_peer DOMAIN_ID SECONDS. Prints "ready", then one line per echo.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>

#include "RosMsgs.h"
#include "RosMsgsPubSubTypes.h"

using namespace eprosima::fastdds::dds;

static volatile std::sig_atomic_t g_stop = 0;
static void on_signal(int) { g_stop = 1; }

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::cerr << "usage: fastdds_echo_peer DOMAIN_ID SECONDS" << std::endl;
        return 2;
    }
    const int domain = std::atoi(argv[1]);
    const double seconds = std::atof(argv[2]);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);

    DomainParticipantQos pqos;
    pqos.name("fastdds_echo_peer");
    DomainParticipant* participant =
        DomainParticipantFactory::get_instance()->create_participant(domain, pqos);
    if (participant == nullptr) {
        std::cerr << "cannot create a Fast DDS participant" << std::endl;
        return 1;
    }
    TypeSupport js_type(new sensor_msgs::msg::JointStatePubSubType());
    TypeSupport fa_type(new std_msgs::msg::Float64MultiArrayPubSubType());
    js_type.register_type(participant);
    fa_type.register_type(participant);

    Topic* js_in = participant->create_topic(
        "rt/fastdds_peer/joint_states_in", js_type.get_type_name(), TOPIC_QOS_DEFAULT);
    Topic* js_out = participant->create_topic(
        "rt/fastdds_peer/joint_states_out", js_type.get_type_name(), TOPIC_QOS_DEFAULT);
    Topic* fa_in = participant->create_topic(
        "rt/fastdds_peer/commands_in", fa_type.get_type_name(), TOPIC_QOS_DEFAULT);
    Topic* fa_out = participant->create_topic(
        "rt/fastdds_peer/commands_out", fa_type.get_type_name(), TOPIC_QOS_DEFAULT);

    // ROS 2's default QoS profile.
    DataWriterQos wqos = DATAWRITER_QOS_DEFAULT;
    wqos.reliability().kind = RELIABLE_RELIABILITY_QOS;
    wqos.durability().kind = VOLATILE_DURABILITY_QOS;
    wqos.history().kind = KEEP_LAST_HISTORY_QOS;
    wqos.history().depth = 10;
    DataReaderQos rqos = DATAREADER_QOS_DEFAULT;
    rqos.reliability().kind = RELIABLE_RELIABILITY_QOS;
    rqos.durability().kind = VOLATILE_DURABILITY_QOS;
    rqos.history().kind = KEEP_LAST_HISTORY_QOS;
    rqos.history().depth = 10;

    Publisher* pub = participant->create_publisher(PUBLISHER_QOS_DEFAULT);
    Subscriber* sub = participant->create_subscriber(SUBSCRIBER_QOS_DEFAULT);
    DataWriter* js_writer = pub->create_datawriter(js_out, wqos);
    DataWriter* fa_writer = pub->create_datawriter(fa_out, wqos);
    DataReader* js_reader = sub->create_datareader(js_in, rqos);
    DataReader* fa_reader = sub->create_datareader(fa_in, rqos);
    if (!js_writer || !fa_writer || !js_reader || !fa_reader) {
        std::cerr << "cannot create Fast DDS endpoints" << std::endl;
        return 1;
    }
    std::cout << "ready" << std::endl;

    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long>(seconds * 1000));
    long n_js = 0, n_fa = 0;
    while (!g_stop && std::chrono::steady_clock::now() < end) {
        bool idle = true;
        sensor_msgs::msg::JointState js;
        SampleInfo info;
        while (js_reader->take_next_sample(&js, &info) == ReturnCode_t::RETCODE_OK) {
            idle = false;
            if (!info.valid_data) continue;
            for (double& p : js.position()) p += 1.0;
            js.header().frame_id("fastdds:" + js.header().frame_id());
            js_writer->write(&js);
            std::cout << "echo joint_states " << ++n_js << std::endl;
        }
        std_msgs::msg::Float64MultiArray fa;
        while (fa_reader->take_next_sample(&fa, &info) == ReturnCode_t::RETCODE_OK) {
            idle = false;
            if (!info.valid_data) continue;
            for (double& d : fa.data()) d *= 2.0;
            fa_writer->write(&fa);
            std::cout << "echo commands " << ++n_fa << std::endl;
        }
        if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    participant->delete_contained_entities();
    DomainParticipantFactory::get_instance()->delete_participant(participant);
    std::cout << "done joint_states=" << n_js << " commands=" << n_fa << std::endl;
    return 0;
}
